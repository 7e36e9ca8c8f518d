"""The reading commands start light: `orch ls`, `show`, `diff` and `compare` read the database over
plain DB-API (store/reading.py) and load neither SQLAlchemy, SQLModel nor pydantic (typer 0.29 would
convert every option through a pydantic TypeAdapter: cli/coercion.py converts the plain ones), nor the
experiment reader and YAML; their --json and --csv output loads no rich either."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.specs import make_run
from orchestrator.store.database import Store

ROOT = Path(__file__).resolve().parent.parent

# Runs each command line given, in order, in one process; after each, a line naming the heavy modules loaded
PROBE = """
import json, sys
import orchestrator.cli as cli
heavy = ("sqlalchemy", "sqlmodel", "pydantic", "yaml", "rich", "orchestrator.store.database")
for args in json.loads(sys.argv[1]):
    sys.argv = ["orch", *args]
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code == 0, (args, exc.code)
    print("\\n@@LOADED", *[name for name in heavy if name in sys.modules])
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('startup') / 'orch.db'}"
    store = Store(url)
    for n, steps in enumerate((3, 3, 5)):
        make_run(store, n, steps=steps, accept=2.0 + n, tok_s=100.0)
    return url


MACHINE_READABLE = [("ls", "--json"), ("ls", "--csv"), ("show", "last", "--json"), ("diff", "--json"),
                    ("compare", "sweep", "--json")]


def test_reading_commands_load_no_database_layer_and_their_json_no_rich(db):
    """One process (each command in a fresh one would cost the suite seconds): the machine-readable
    outputs first, then `orch ls`'s table, which is the first to load rich."""
    commands = [["--db", db, *args] for args in (*MACHINE_READABLE, ("ls",))]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(commands)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    parts = re.split(r"\n@@LOADED(.*)\n", done.stdout)  # output, loaded, output, loaded, ..., ""
    outputs, loaded = parts[0::2], [names.strip() for names in parts[1::2]]
    assert loaded == [""] * len(MACHINE_READABLE) + ["rich"]
    for args, output in zip(MACHINE_READABLE, outputs):
        assert output.strip(), args
        if "--json" in args:
            json.loads(output)
    assert "sweep" in outputs[len(MACHINE_READABLE)] and "┃" in outputs[len(MACHINE_READABLE)]  # the table


def test_plain_options_convert_as_typer_converts_them(tmp_path):
    """cli/coercion.py: text, whole numbers, numbers, paths and lists of text give the values typer's
    own conversion gives; a value that is not a number is typer's one-line usage error naming the
    option; a bounded option still goes through typer (its bound holds)."""
    import typer
    from typer.testing import CliRunner

    from orchestrator.cli import coercion

    coercion.install()
    app = typer.Typer()
    seen = {}

    @app.command()
    def probe(path: Path = typer.Argument(...), n: int = typer.Option(5, "-n"), x: float = typer.Option(0.5, "--x"),
              name: str = typer.Option("", "--name"), tags: list[str] = typer.Option([], "--tag"),
              port: int = typer.Option(1, "--port", max=10), flag: bool = typer.Option(False, "--flag")) -> None:
        seen.update(path=path, n=n, x=x, name=name, tags=tags, port=port, flag=flag)

    runner = CliRunner()
    done = runner.invoke(app, [str(tmp_path), "-n", "12", "--x", "2.5", "--name", "a b", "--tag", "t1", "--tag", "t2",
                               "--flag"])
    assert done.exit_code == 0, done.output
    assert seen == {"path": tmp_path, "n": 12, "x": 2.5, "name": "a b", "tags": ["t1", "t2"], "port": 1, "flag": True}
    assert type(seen["n"]) is int and type(seen["x"]) is float and isinstance(seen["path"], Path)
    runner.invoke(app, ["rel"])
    assert seen["path"] == Path("rel") and seen["tags"] == [] and seen["n"] == 5 and seen["flag"] is False
    bad = runner.invoke(app, ["p", "-n", "abc"])
    assert bad.exit_code == 2 and "Invalid value for '-n': 'abc' is not a whole number" in bad.output
    bad = runner.invoke(app, ["p", "--x", "fast"])
    assert bad.exit_code == 2 and "'fast' is not a number" in bad.output
    bad = runner.invoke(app, ["p", "--port", "11"])
    assert bad.exit_code == 2 and "10" in bad.output


# One command line in a fresh process (what a command imports stays loaded for the next); prints its
# exit code and the ORM modules loaded, after its own output
ORM_PROBE = """
import sys
import orchestrator.cli as cli
sys.argv = ["orch", *sys.argv[1:]]
code = 0
try:
    cli.main()
except SystemExit as exc:
    code = exc.code
print("\\n@@EXIT", code, "@@LOADED", *[name for name in ("sqlalchemy", "sqlmodel") if name in sys.modules])
"""


@pytest.mark.parametrize("args", [("run", "experiments/eagle_debug.yaml", "--dry-run"),
                                  ("check", "experiments/eagle_debug.yaml"), ("--help",)],
                         ids=["run-dry-run", "check", "help"])
def test_commands_that_write_no_run_load_no_orm_and_make_no_database(tmp_path, args):
    """A dry run, a check and the help write no run: neither SQLAlchemy nor SQLModel is imported
    (they were a third of a dry run's start) and the database file is not even made."""
    db = tmp_path / "orch.db"
    done = subprocess.run([sys.executable, "-c", ORM_PROBE, "--db", f"sqlite:///{db}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output, _, tail = done.stdout.rpartition("\n@@EXIT ")
    code, _, loaded = tail.partition("@@LOADED")
    assert code.strip() == "0", done.stdout + done.stderr
    assert output.strip()  # the command did its work: a dry run's script, a check's findings, the usage
    assert loaded.strip() == ""
    assert not db.exists()
