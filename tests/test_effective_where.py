"""`--where` of `orch ls` and `orch compare` by the values that ran: `k` the param at the engine's
value, `asked.k` the command's, `effective.k` the engine's print alone; on SQLite and on a real
PostgreSQL server (tests/pg.py)."""

from __future__ import annotations

import pytest

from support.specs import make_run
from orchestrator.api import compare, listing
from orchestrator.errors import SpecError
from orchestrator.store.database import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    else:
        store = Store(request.getfixturevalue("postgres").database(f"t_where_{request.function.__name__[5:30]}"))
    # run 1 asked steps 8 and the engine ran 4; run 2 asked 4 and ran 4; run 3 has no print (an old run)
    for n, (asked, ran) in enumerate([(8, 4), (4, 4), (8, None)]):
        run = make_run(store, n, steps=asked, accept=2.0 + n, tok_s=100)
        if ran is not None:
            store.update_run(run, effective_params={"steps": ran, "max_model_len": 256,
                                                    "speculative_config": {"num_speculative_tokens": ran - 1}})
    return store


def listed(store, **where):
    rows, _ = listing.select(store, {"experiment": "sweep"}, where, None, 50)
    return [r.id for r in rows]


def test_ls_where_matches_the_value_the_engine_ran(store):
    assert listed(store, steps=4) == [1, 2]  # run 1 asked 8, ran 4
    assert listed(store, steps=8) == [3]  # run 3 has no print: its asked value is what is known
    assert listed(store, **{"asked.steps": 8}) == [1, 3]
    assert listed(store, **{"effective.steps": 4}) == [1, 2]
    assert listed(store, max_model_len=256) == [1, 2]  # a name only the engine prints
    assert listed(store, **{"effective.speculative_config.num_speculative_tokens": 3}) == [1, 2]


def test_ls_where_an_unknown_key_names_the_close_one(store):
    with pytest.raises(SpecError, match="did you mean 'effective.steps'"):
        listed(store, **{"effective.stepz": 4})


def test_compare_where_reads_alike(store):
    chosen, left_out = compare.load(store, "sweep", {"steps": 4})
    assert [r["id"] for r in chosen] == [1, 2] and left_out["not matching --where"] == 1
    chosen, _ = compare.load(store, "sweep", {"asked.steps": 8})
    assert [r["id"] for r in chosen] == [1, 3]


def test_compare_table_says_which_asked_configurations_ran_as_one(tmp_path, monkeypatch, capsys):
    from support.cli import orch_main

    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    for n, asked in enumerate([8, 4, 6]):
        run = make_run(store, n, steps=asked, accept=2.0 + n / 10, tok_s=100)
        store.update_run(run, effective_params={"steps": 4 if asked in (8, 4) else 6})
    code, out, _, _ = orch_main(None, ["compare", "sweep"], ["--db", store.url], strict=True)
    assert code == 0 and "3 succeeded run(s) in 2 configuration(s)" in out
    lines = [text for text in out.splitlines() if "ran as one" in text]
    assert lines == ["steps=8 and steps=4 ran as one configuration (steps=4): the engine adjusted them"]
    assert out.index("ran as one") > out.index("by output_tok_s")  # under the table, not above it
