"""The store's tables are declared once (store/tables.py): the plain paths made from that
declaration and the SQLModel models read and write the same rows. A run written by the plain write
path (orch import's) into a file the plain path made is read by the models as they would have made
it; a run the models write reads back through the plain read path whole; a model that drifts from
the declaration stops orch at import. On SQLite and on a real PostgreSQL server (tests/pg.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlmodel import SQLModel

from orchestrator.store import database, freshfile, importing, modelcheck, reading, tables
from orchestrator.store.database import EventRow, MetricRow, Run, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path: Path) -> str:
    """A database at this orch's schema: an SQLite file the plain path made (freshfile), or a
    database on the session's PostgreSQL server the store made."""
    if request.param == "sqlite":
        path = tmp_path / "orch.db"
        assert freshfile.make(path)
        return f"sqlite:///{path}"
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    made = request.getfixturevalue("postgres").database(name)
    Store(made).engine.dispose()
    return made


def test_a_run_the_plain_path_writes_is_the_run_the_models_make(url):
    """Only the columns every row must give: each default the plain path fills is the models'."""
    writer = importing.open_current(url)
    assert writer is not None  # at the schema: no store needed
    given = {"uid": "plain-1", "experiment": "e", "variant": "v", "host": "h"}
    written = writer.add_run(given)
    writer.add_metrics(written, [{"run_id": written.id, "name": "accept_len", "value": 2.5}])
    writer.event(written, "imported", "by hand")
    writer.commit()
    writer.close()

    found, made = Store(url).get("plain-1"), Run(**given)
    ignored = {"id", "started_at", "metrics_json"}  # given by the database, the clock, the metric rows
    assert {k: v for k, v in found.model_dump().items() if k not in ignored} == \
           {k: v for k, v in made.model_dump().items() if k not in ignored}
    assert found.started_at[:4].isdigit() and found.metrics_json == '{"accept_len":2.5}'
    metric, = Store(url).children(found, MetricRow)
    assert (metric.name, metric.value, metric.source, metric.note) == ("accept_len", 2.5, "", "")
    event, = Store(url).children(found, EventRow)
    assert (event.kind, event.message, event.at[:4].isdigit()) == ("imported", "by hand", True)


def test_a_run_the_models_write_reads_back_whole_through_the_plain_read_path(url):
    store = Store(url)
    run = Run(uid="orm-1", experiment="e", variant="v", host="h", params={"steps": 3}, flags=["x"],
              diagnosis={"signature": "s"}, effective_params={"tp": 2}, plan_key="k", server_run_id=7)
    store.add(run)
    plain = reading.get(reading.open_url(url), "orm-1")
    assert plain._asdict() == store.get("orm-1").model_dump()


def test_a_model_that_drifts_from_the_declaration_is_refused(monkeypatch):
    models = [getattr(database, name) for name in ("Run", "PatchRow", "MetricRow", "DebugRow", "SeriesRow",
                                                   "SeriesBlockRow", "HistogramRow", "RequestRow", "EventRow",
                                                   "LogRow", "NodeLogRow", "CheckpointRow", "FindingRow")]
    modelcheck.check(SQLModel.metadata, models)  # as database.py checks them
    columns = tuple(dataclasses.replace(c, default="") if c.name == "host" else c for c in tables.RUN.columns)
    monkeypatch.setitem(tables.BY_NAME, "run", dataclasses.replace(tables.RUN, columns=columns))
    with pytest.raises(RuntimeError, match="run: the model"):
        modelcheck.check(SQLModel.metadata, models)
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="findingrow: declared in store/tables.py, no model"):
        _without(models, "findingrow")


def _without(models: list[type[SQLModel]], name: str) -> None:
    """The check of metadata that lacks table `name` (a model removed but still declared)."""
    from sqlalchemy import MetaData

    partial = MetaData()
    for table in SQLModel.metadata.tables.values():
        if table.name != name:
            table.to_metadata(partial)
    modelcheck.check(partial, [m for m in models if m.__tablename__ != name])
