"""`orch tag` and `orch note` through the real command on runs a rehearsal sweep made, in a real
SQLite file (and on a real PostgreSQL server, tests/pg.py): set, replaced, removed, shown by `orch
show` and `orch ls`, found by `orch ls --tag`, kept as given and printed escaped; every bad input
one line, exit 2, the database as it was; a database of the schema before tags upgraded in place."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from orchestrator.store import schema, tags
from orchestrator.store.database import Store, current_user
from support.cli import orch
from support.specs import make_run

ESC = "\x1b"


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A folder whose orch.db holds the two runs of a rehearsal sweep (speculative_num_steps 3, 5)."""
    project = tmp_path_factory.mktemp("swept")
    (project / "templates").mkdir()
    shutil.copy(ROOT / "templates" / "sglang_launch.sh.j2", project / "templates")
    (project / "experiments").mkdir()
    (project / "inventory.yaml").write_text(f"hosts:\n  local:\n    transport: local\n    workdir: {project / 'host'}\n"
                                            "    gpus: 8\n    rehearsal: true\n")
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    text = text.replace("requests: 16", "requests: 2").replace("max_new_tokens: 96", "max_new_tokens: 8")
    path = project / "experiments" / "sweep.yaml"
    path.write_text(text + "\nmatrix:\n  speculative_num_steps: [3, 5]\n")
    done = orch(project, "run", str(path), "--variant", "fixed", "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    return project


@pytest.fixture
def project(swept: Path, tmp_path: Path) -> Path:
    """A copy of the sweep's database of this test's own (the runs 1 and 2, untagged)."""
    shutil.copy(swept / "orch.db", tmp_path / "orch.db")
    return tmp_path


def ok(project: Path, *args: str, stdin: str | None = None) -> str:
    done = orch(project, *args) if stdin is None else _with_stdin(project, stdin, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _with_stdin(project: Path, stdin: str, *args: str):
    import subprocess

    from support.cli import ORCH, orch_env

    return subprocess.run([*ORCH, *args], cwd=project, env=orch_env(project), input=stdin, capture_output=True,
                          text=True, timeout=120)


def shown(project: Path, run: str = "1") -> dict:
    return json.loads(ok(project, "show", run, "--json"))


def listed(project: Path, *args: str) -> list[dict]:
    return json.loads(ok(project, "ls", "--json", *args))


def test_tags_are_set_replaced_removed_and_found_by_ls(project):
    assert ok(project, "tag", "1", "baseline=yes", "gpu=h100").strip() == "run 1: tags baseline=yes  gpu=h100"
    said = ok(project, "tag", "last", "gpu=h200", "url=http://x/?a=b=c")  # the value: what follows the first =
    assert said.strip() == "run 2: tags gpu=h200  url=http://x/?a=b=c"  # `last` said by its id
    ok(project, "tag", "1", "gpu=h200")  # a key the run has takes the new value
    one, two = shown(project, "1"), shown(project, "2")
    assert one["tags"] == {"baseline": "yes", "gpu": "h200"} and two["tags"] == {"gpu": "h200", "url": "http://x/?a=b=c"}
    assert set(one["tag_authors"]) == {"baseline", "gpu"}
    assert {a["user"] for a in one["tag_authors"].values()} == {current_user()}
    assert one["tag_authors"]["gpu"]["at"] > one["tag_authors"]["baseline"]["at"]  # set again: when, again

    assert [(r["id"], r["tags"]) for r in listed(project)] == [(1, one["tags"]), (2, two["tags"])]
    assert [r["id"] for r in listed(project, "--tag", "baseline")] == [1]
    assert [r["id"] for r in listed(project, "--tag", "gpu=h200")] == [1, 2]
    assert [r["id"] for r in listed(project, "--tag", "gpu=h200", "--tag", "url")] == [2]  # every --tag holds
    assert listed(project, "--tag", "gpu=H200") == []  # values match exactly
    assert [r["id"] for r in listed(project, "--tag", "gpu", "--sort", "accept_len")] == [2, 1]  # the other path
    table = ok(project, "ls", "--tag", "baseline")
    assert "tags" in table and "baseline=yes, gpu=h200" in table

    ok(project, "tag", "1", "--rm", "baseline", "new=1")
    assert shown(project, "1")["tags"] == {"gpu": "h200", "new": "1"}
    assert ok(project, "tag", "1", "--rm", "gpu", "--rm", "new").strip() == "run 1: no tags"
    assert shown(project, "1")["tags"] == {}
    ok(project, "tag", "2", "--rm", "gpu", "--rm", "url")
    assert "tags" not in ok(project, "ls")  # no listed run has tags: no column for them


def test_a_note_is_set_from_text_or_stdin_replaced_and_removed(project):
    ok(project, "note", "1", "draft from step 40k")
    assert shown(project)["note"]["text"] == "draft from step 40k"
    assert shown(project)["note"]["user"] == current_user()
    ok(project, "note", "1", "-", stdin="first line\n  second line\n")  # replaced; stdin's last newline dropped
    assert shown(project)["note"]["text"] == "first line\n  second line"
    text = ok(project, "show", "1")
    assert "note (by" in text and "  first line\n    second line" in text
    ok(project, "note", "1", "--rm")
    assert shown(project)["note"] is None
    ok(project, "note", "1", "again")
    ok(project, "note", "1", "")  # empty: removed
    assert shown(project)["note"] is None and "note (by" not in ok(project, "show", "1")


def test_values_are_kept_as_given_and_printed_escaped(project):
    """A tag value and a note are data: an ESC sequence and rich markup reach the database as
    given, and the terminal sees them escaped, never as a colour or a rewritten line."""
    value = f"{ESC}[2J[red]x[/red]\r"
    ok(project, "tag", "1", f"bad={value}")
    ok(project, "note", "1", "-", stdin=f"ok{ESC}]0;title\a[bold]b[/bold]")
    record = shown(project)
    assert record["tags"]["bad"] == value and record["note"]["text"] == f"ok{ESC}]0;title\a[bold]b[/bold]"
    for out in (ok(project, "show", "1"), ok(project, "ls"), ok(project, "tag", "1", "other=1")):
        assert ESC not in out and "\r" not in out and "\a" not in out
        assert "\\x1b[2J[red]x[/red]\\r" in out
    assert "ok\\x1b]0;title\\x07[bold]b[/bold]" in ok(project, "show", "1")
    assert json.loads(ok(project, "ls", "--json"))[0]["tags"]["bad"] == value


def _dump(project: Path) -> list[str]:
    """Everything the database holds, as SQL (what a write, even one still in the WAL, would change)."""
    with sqlite3.connect(project / "orch.db") as db:
        return list(db.iterdump())


@pytest.mark.parametrize(("args", "said"), [
    (("tag", "1", "baseline"), "orch tag: 'baseline' is not key=value; give e.g. baseline=yes"),
    (("tag", "1", "ok=1", "bad key=1"), "the tag key 'bad key' may hold only letters, digits and _ . - / :"),
    (("tag", "1", "=1"), "the tag key is empty"),
    (("tag", "1", "k\x07=1"), "the tag key 'k\\x07' may hold only"),
    (("tag", "1", "k" * 65 + "=1"), "is 65 characters long; at most 64"),
    (("tag", "1", "k=" + "v" * 1001), "the value of tag 'k' is 1001 characters long; at most 1000"),
    (("tag", "1", "gpu=h100", "--rm", "gpu"), "tag 'gpu' is both set and removed"),
    (("tag", "1", "--rm", "baseline"), "orch tag --rm baseline: run 1 has no tag 'baseline'; its tags: gpu"),
    (("tag", "1"), "nothing to do; give tags as key=value, or --rm KEY"),
    (("tag", "9", "k=v"), "no run '9' in"),
    (("note", "1"), "give the note's TEXT (`-`: read from standard input), or --rm"),
    (("note", "1", "text", "--rm"), "give the note's TEXT or --rm to remove it, not both"),
    (("note", "1", "n" * 20001), "the note is 20001 characters long; at most 20000"),
    (("note", "last~5", "text"), "it holds fewer runs"),
    (("ls", "--tag", "a b"), "--tag 'a b': the tag key 'a b' may hold only"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(project, args, said):
    tags.write_tags(Store(f"sqlite:///{project / 'orch.db'}"), 1, {"gpu": "a100"}, [])
    before = _dump(project)
    done = orch(project, *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _dump(project) == before


def test_a_nul_in_a_note_is_refused(project):
    before = _dump(project)
    done = _with_stdin(project, "a\x00b", "note", "1", "-")
    assert done.returncode == 2 and "holds a NUL character" in done.stderr and _dump(project) == before


def test_a_run_in_no_database_makes_none(tmp_path):
    done = orch(tmp_path, "tag", "1", "k=v")
    assert done.returncode == 2 and "no run '1'" in done.stderr and not (tmp_path / "orch.db").exists()


def test_the_library_face_sets_and_reads_what_the_command_does(project):
    import orchestrator

    db = f"sqlite:///{project / 'orch.db'}"
    assert orchestrator.tag_run("2", ["steps=5", "k=v"], db=db, remove=()) == {"k": "v", "steps": "5"}
    assert orchestrator.tag_run("2", db=db, remove=["k"]) == {"steps": "5"}
    assert orchestrator.note_run("2", "n", db=db)["text"] == "n"
    assert [r.id for r in orchestrator.list_runs(db=db, tags=["steps=5"]).rows] == [2]
    assert orchestrator.list_runs(db=db).tags == {2: {"steps": "5"}}
    with pytest.raises(orchestrator.SpecError, match="not key=value"):
        orchestrator.tag_run("2", ["steps"], db=db)


def _at_schema_5(url: str) -> None:
    """The database as an orch of schema 5 left it: no tag or note tables."""
    from sqlalchemy import create_engine, text

    from orchestrator.store.database import _driver_url

    engine = create_engine(_driver_url(url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE tagrow"))
        conn.execute(text("DROP TABLE noterow"))
        conn.execute(text(f"DELETE FROM {schema.TABLE}"))
        conn.execute(text(f"INSERT INTO {schema.TABLE} (version) VALUES (5)"))
    engine.dispose()


def test_a_database_of_schema_5_is_upgraded_by_the_first_tag(project):
    url = f"sqlite:///{project / 'orch.db'}"
    _at_schema_5(url)
    done = orch(project, "tag", "1", "k=v")
    assert done.returncode == 0, done.stderr
    assert "from schema 5 to 6" in done.stderr and (project / "orch.db.schema-5.bak").exists()
    assert shown(project)["tags"] == {"k": "v"}
    with sqlite3.connect(project / "orch.db") as db:
        assert db.execute(f"SELECT max(version) FROM {schema.TABLE}").fetchone() == (schema.VERSION,)


def test_tags_and_notes_on_postgresql(postgres, tmp_path):
    """A team database: the same commands, the listing made without SQLite's JSON (its other path),
    and an upgrade from schema 5 in place."""
    url = postgres.database("t_tags")
    store = Store(url)
    for n in range(3):
        make_run(store, n, steps=3 + n, tok_s=100.0 + n, accept=2.0 + n)
    store.engine.dispose()
    _at_schema_5(url)

    def pg(*args: str) -> str:
        return ok(tmp_path, "--db", url, *args)

    pg("tag", "2", "baseline=yes", "gpu=h100 ü")
    pg("tag", "3", "gpu=h200")
    pg("note", "3", "long\nnote")
    assert [(r["id"], r["tags"]) for r in json.loads(pg("ls", "--json"))] == [
        (1, {}), (2, {"baseline": "yes", "gpu": "h100 ü"}), (3, {"gpu": "h200"})]
    assert [r["id"] for r in json.loads(pg("ls", "--json", "--tag", "gpu"))] == [2, 3]
    assert [r["id"] for r in json.loads(pg("ls", "--json", "--tag", "gpu=h200", "--sort", "accept_len"))] == [3]
    record = json.loads(pg("show", "3", "--json"))
    assert record["tags"] == {"gpu": "h200"} and record["note"]["text"] == "long\nnote"
    pg("tag", "2", "--rm", "baseline")
    assert json.loads(pg("show", "2", "--json"))["tags"] == {"gpu": "h100 ü"}
    done = orch(tmp_path, "--db", url, "tag", "2", "--rm", "baseline")
    assert done.returncode == 2 and "has no tag 'baseline'" in done.stderr


def test_where_reaches_tags_in_compare_and_ls(project):
    """`--where tag.KEY=VALUE` as any `--where` condition: `orch compare` ranks only the tagged
    runs' configurations, `orch ls` lists only them; a tag no run has is an error as a param is."""
    ok(project, "tag", "1", "baseline=yes", "batch=5")
    ok(project, "tag", "2", "batch=6")
    data = json.loads(ok(project, "compare", "eagle_debug", "--json", "--where", "tag.baseline=yes"))
    assert [r["params"]["speculative_num_steps"] for r in data["rows"]] == [3]
    data = json.loads(ok(project, "compare", "eagle_debug", "--json", "--where", "tag.batch=6"))  # as --set reads 6
    assert [r["params"]["speculative_num_steps"] for r in data["rows"]] == [5]
    assert [r["id"] for r in listed(project, "--where", "tag.batch=5")] == [1]
    done = orch(project, "compare", "eagle_debug", "--where", "tag.baselin=yes")
    assert done.returncode == 2 and "has a param 'tag.baselin'; did you mean 'tag.baseline'?" in done.stderr


def test_the_report_shows_tags_and_note_escaped(project):
    ok(project, "tag", "1", "why=<script>alert(1)</script>")
    ok(project, "note", "1", "-", stdin="a & b\n<b>bold</b>")
    ok(project, "report", "eagle_debug", "-o", str(project / "report.html"))
    page = (project / "report.html").read_text()
    assert "tags: why=&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "<pre>a &amp; b\n&lt;b&gt;bold&lt;/b&gt;</pre>" in page


def _at_once(folder: Path, db: str, count: int) -> None:
    """`count` processes tag run 1 at the same moment: each the shared key `k` and one of its own."""
    import subprocess

    from support.cli import ORCH, orch_env

    procs = [subprocess.Popen([*ORCH, "--db", db, "tag", "1", f"k=v{i}", f"own{i}=yes"], cwd=folder,
                              env=orch_env(folder), stderr=subprocess.PIPE, text=True) for i in range(count)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * count, errors


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_taggers_at_once_lose_no_tag(kind, project, request):
    db = f"sqlite:///{project / 'orch.db'}"
    if kind == "postgresql":
        db = request.getfixturevalue("postgres").database("t_tags_at_once")
        store = Store(db)
        make_run(store, 0, steps=3, tok_s=1.0, accept=2.0)
        store.engine.dispose()
    _at_once(project, db, 4)
    found = json.loads(ok(project, "--db", db, "show", "1", "--json"))["tags"]
    assert {k for k in found if k.startswith("own")} == {f"own{i}" for i in range(4)}
    assert found["k"] in {f"v{i}" for i in range(4)}


def test_ls_csv_has_a_column_per_tag(project):
    import csv
    import io

    ok(project, "tag", "2", "gpu=h100, \"sxm\"", "batch=1")
    rows = list(csv.DictReader(io.StringIO(ok(project, "ls", "--csv"))))
    assert [(r["id"], r["tag.batch"], r["tag.gpu"]) for r in rows] == [("1", "", ""), ("2", "1", "h100, \"sxm\"")]
