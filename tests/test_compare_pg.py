"""The compare and listing queries on SQLite and on a real PostgreSQL server (tests/pg.py): the same
runs written through the real Store, the same configurations, marks and listings read back."""

from __future__ import annotations

import pytest

from support.specs import make_run
from orchestrator.core import compare
from orchestrator.store import queries
from orchestrator.store.database import FAILED, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        return Store(f"sqlite:///{tmp_path / 'orch.db'}")
    return Store(request.getfixturevalue("postgres").database("t_compare_queries"))


def test_configurations_and_listing_read_back_alike(store):
    for n, (steps, accept) in enumerate([(3, 2.0), (5, 3.0), (3, 2.2), (5, 2.9)]):
        make_run(store, n, steps=steps, accept=accept, tok_s=100 + n, host="ab"[n % 2], port=30000 + n)
    make_run(store, 4, steps=9, accept=9.0, tok_s=9, status=FAILED)
    runs = queries.comparable_runs(store, "sweep")
    assert [r["id"] for r in runs] == [1, 2, 3, 4] and runs[0]["patches"] == [("fix", "b" * 64)]
    assert runs[0]["metrics"]["accept_len"] == 2.0  # the first row of a name, not the later empty one
    c = compare.compare("sweep", runs, {}, "accept_len", frozenset({"port", "gpus"}))
    assert [(g.params["steps"], g.run_ids, g.mark) for g in c.groups] == [(5, [2, 4], "best"), (3, [1, 3], "")]
    assert queries.status_counts(store, "sweep") == {"succeeded": 4, "failed": 1}
    assert queries.experiments(store) == ["sweep"] and "output_tok_s" in queries.metric_names(store)
    assert [r.id for r in queries.listed_runs(store, host="b", limit=1)] == [4]
