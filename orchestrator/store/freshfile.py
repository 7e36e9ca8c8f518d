"""A fresh SQLite file made at this orch's schema without SQLAlchemy: `orch import` into a database
that does not exist yet (importing SQLAlchemy, SQLModel and pydantic to make the tables was 0.85 s of
the 2.8 s an import of a 64 MB log took). The statements are the ones the store's models make on
SQLite, as SQLite keeps them: tests/test_import.py holds them equal to a file the store made, and
after a model changes `python -m orchestrator.store.freshfile` prints them anew.

The file is made whole beside its place and linked there (a link fails where the name exists), so no
controller ever opens a file half made, and two making it at once leave one.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .reading import SCHEMA_TABLE, VERSION

# The schema's statements, as `python -m orchestrator.store.freshfile` prints them
STATEMENTS = (
    'CREATE TABLE run (\n\tid INTEGER NOT NULL, \n\tuid VARCHAR NOT NULL, \n\texperiment VARCHAR NOT NULL, \n\tvariant VARCHAR NOT NULL, \n\thost VARCHAR NOT NULL, \n\tstatus VARCHAR NOT NULL, \n\trepeat INTEGER NOT NULL, \n\tspec_path VARCHAR NOT NULL, \n\tspec JSON, \n\tparams JSON, \n\tenv JSON, \n\tcommand VARCHAR NOT NULL, \n\tflags JSON, \n\terror VARCHAR, \n\tdiagnosis JSON, \n\tcontroller VARCHAR NOT NULL, \n\tusername VARCHAR, \n\tstarted_at VARCHAR NOT NULL, \n\tended_at VARCHAR, \n\tplan_key VARCHAR, \n\tfingerprint VARCHAR, \n\tserver_run_id INTEGER, \n\tmetrics_json VARCHAR, \n\teffective_params JSON, \n\tPRIMARY KEY (id)\n)',
    'CREATE TABLE patchrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tseq INTEGER NOT NULL, \n\tname VARCHAR NOT NULL, \n\ttarget VARCHAR NOT NULL, \n\tfile VARCHAR NOT NULL, \n\tsha256_before VARCHAR NOT NULL, \n\tsha256_after VARCHAR NOT NULL, \n\tstate VARCHAR NOT NULL, \n\tnode INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE metricrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tname VARCHAR NOT NULL, \n\tvalue FLOAT, \n\tsource VARCHAR NOT NULL, \n\tnote VARCHAR NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE debugrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tseq INTEGER NOT NULL, \n\ttext VARCHAR NOT NULL, \n\tfields JSON, \n\tnode INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE seriesrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tkind VARCHAR NOT NULL, \n\tseq INTEGER NOT NULL, \n\ttime VARCHAR, \n\t"values" JSON, \n\tnode INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE seriesblockrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tkind VARCHAR NOT NULL, \n\tseq INTEGER NOT NULL, \n\tpoints INTEGER NOT NULL, \n\tdata BLOB, \n\tnode INTEGER NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE histogramrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tname VARCHAR NOT NULL, \n\tcounts JSON, \n\tsource VARCHAR NOT NULL, \n\tnote VARCHAR NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE requestrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tseq INTEGER NOT NULL, \n\tat_s FLOAT NOT NULL, \n\tttft_ms FLOAT, \n\te2e_ms FLOAT NOT NULL, \n\tprompt_tokens INTEGER NOT NULL, \n\tcompletion_tokens INTEGER NOT NULL, \n\taccept_len FLOAT, \n\titl_ms JSON, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE eventrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tat VARCHAR NOT NULL, \n\tkind VARCHAR NOT NULL, \n\tmessage VARCHAR NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE logrow (\n\trun_id INTEGER NOT NULL, \n\tsize INTEGER NOT NULL, \n\tdata BLOB, \n\tPRIMARY KEY (run_id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE nodelogrow (\n\trun_id INTEGER NOT NULL, \n\tnode INTEGER NOT NULL, \n\thost VARCHAR NOT NULL, \n\tsize INTEGER NOT NULL, \n\tdata BLOB, \n\tPRIMARY KEY (run_id, node), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE checkpointrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tname VARCHAR NOT NULL, \n\tdest VARCHAR NOT NULL, \n\tsource_hash VARCHAR NOT NULL, \n\ttransforms JSON, \n\tresult_hash VARCHAR NOT NULL, \n\tmanifest_hash VARCHAR NOT NULL, \n\tfiles INTEGER NOT NULL, \n\ttotal_bytes INTEGER NOT NULL, \n\tsent_files INTEGER NOT NULL, \n\tsent_bytes INTEGER NOT NULL, \n\tseconds FLOAT NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE findingrow (\n\tid INTEGER NOT NULL, \n\trun_id INTEGER NOT NULL, \n\tseverity VARCHAR NOT NULL, \n\tcode VARCHAR NOT NULL, \n\twhat VARCHAR NOT NULL, \n\twhy VARCHAR NOT NULL, \n\tfix VARCHAR NOT NULL, \n\tallowed BOOLEAN NOT NULL, \n\tPRIMARY KEY (id), \n\tFOREIGN KEY(run_id) REFERENCES run (id)\n)',
    'CREATE TABLE orch_schema (version INTEGER NOT NULL)',
    'CREATE UNIQUE INDEX ix_run_uid ON run (uid)',
    'CREATE INDEX ix_run_status ON run (status)',
    'CREATE INDEX ix_run_experiment ON run (experiment)',
    'CREATE INDEX ix_run_username ON run (username)',
    'CREATE INDEX ix_run_host ON run (host)',
    'CREATE INDEX ix_run_resume ON run (experiment, status, plan_key, fingerprint)',
    'CREATE INDEX ix_patchrow_run_id ON patchrow (run_id)',
    'CREATE INDEX ix_metricrow_run_id ON metricrow (run_id)',
    'CREATE INDEX ix_debugrow_run_id ON debugrow (run_id)',
    'CREATE INDEX ix_seriesrow_run_id ON seriesrow (run_id)',
    'CREATE INDEX ix_seriesblockrow_run_id ON seriesblockrow (run_id)',
    'CREATE INDEX ix_histogramrow_run_id ON histogramrow (run_id)',
    'CREATE INDEX ix_requestrow_run_id ON requestrow (run_id)',
    'CREATE INDEX ix_eventrow_run_id ON eventrow (run_id)',
    'CREATE INDEX ix_checkpointrow_run_id ON checkpointrow (run_id)',
    'CREATE INDEX ix_findingrow_run_id ON findingrow (run_id)',
)


def make(path: Path) -> bool:
    """The SQLite file at `path` made with the schema and its version; False when another
    controller made it first (or its folder is missing: the store says so)."""
    if not path.parent.is_dir():
        return False
    partial = path.with_name(f".{path.name}.{os.getpid()}.new")
    partial.unlink(missing_ok=True)
    try:
        connection = sqlite3.connect(partial)
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # as the store's files (kept in the file)
            with connection:
                for statement in STATEMENTS:
                    connection.execute(statement)
                connection.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (?)", (VERSION,))
        finally:
            connection.close()
        os.link(partial, path)
        return True
    except FileExistsError:
        return False
    finally:
        partial.unlink(missing_ok=True)


def statements_of(path: Path) -> list[str]:
    """The schema statements an SQLite file keeps (tables first, in the order made)."""
    with sqlite3.connect(path) as connection:
        return [sql for (sql,) in connection.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type DESC, rowid")]


if __name__ == "__main__":  # the statements anew, from a file the store makes now
    import tempfile

    from .database import Store

    with tempfile.TemporaryDirectory() as folder:
        made = Path(folder) / "orch.db"
        Store(f"sqlite:///{made}").engine.dispose()
        print("STATEMENTS = (")
        for statement in statements_of(made):
            print(f"    {statement!r},")
        print(")")
