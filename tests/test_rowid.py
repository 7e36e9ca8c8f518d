"""A stored run's row id: an int once the store wrote the run, a named error before."""

from __future__ import annotations

import pytest

from orchestrator.errors import StoreError
from orchestrator.store.database import Run, Store
from orchestrator.store.rowid import stored_id


def _run() -> Run:
    return Run(uid="r-1", experiment="e", variant="v", host="h")


def test_a_stored_run_has_its_row_id(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'orch.db'}")
    run = _run()
    store.add(run)
    assert stored_id(run) == run.id and isinstance(run.id, int)


def test_a_run_never_stored_is_named():
    with pytest.raises(StoreError, match="run r-1 has no row id"):
        stored_id(_run())
