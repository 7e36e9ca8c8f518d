"""Drift, then another run: a file orch patched and put back, changed by hand since, is not patched on
top of silently. The next run stops before anything on the host changes (exit 2, one error line and the
bounded diff, a terminal escape in it shown as text); `orch revert --force` puts back what orch left;
`orch run --accept-drift` records the drift and patches the file as it is (its `sha256_before`), which
then stays the file's baseline. On the local rehearsal host and over a real sshd; the journal's own
case (a file changed while a run had it patched) through the host layer."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

import sshd
from conftest import free_port
from support.cli import orch
from support.specs import debug_patch, small_experiment

PATCHED = "rehearsal/sglang/srt/models/llama_eagle3.py"
PATCH = debug_patch("debug-hidden-states", 'print(f"[EAGLE3-DEBUG] shape={hidden_states.shape}", flush=True)')
HAND_EDIT = b"# tuned by hand \x1b[31mred\x1b[0m\n"


@pytest.fixture(params=["local", "ssh"])
def where(request, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(project, host name, host workdir): the rehearsal host on this machine, or over a real sshd."""
    if request.param == "local":
        yield project, "local", project / "host"
        return
    if sshd.sshd_missing():
        pytest.skip(sshd.sshd_missing())
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # nothing here may read the user's ~/.ssh
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    server = sshd.start(tmp_path / "sshd", "box")
    known = project / "known_hosts"
    known.write_text(server.known_line())
    workdir = project / "box-work"
    (project / "inventory.yaml").write_text("hosts:\n" + server.rehearsal_entry(known, workdir))
    try:
        yield project, "box", workdir
    finally:
        server.stop()


def experiment(project: Path, host: str) -> Path:
    spec = project / "experiments" / "drift.yaml"
    spec.write_text(small_experiment("drift", free_port(), 0, PATCH, hosts=[host]))
    return spec


def state(workdir: Path) -> dict[str, bytes]:
    """Every file orch keeps on the host besides the stand-in (journal, baselines, run folders, lock)."""
    kept = [p for p in workdir.rglob("*") if p.is_file() and not p.is_relative_to(workdir / "rehearsal")]
    return {str(p.relative_to(workdir)): p.read_bytes() for p in kept}


def show(project: Path) -> dict:
    return json.loads(orch(project, "show", "last", "--json", columns="400").stdout)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_hand_edit_since_the_revert_stops_the_next_run_until_resolved(where):
    project, host, workdir = where
    spec = experiment(project, host)
    first = orch(project, "run", str(spec), columns="400")
    assert first.returncode == 0, first.stdout + first.stderr
    target = workdir / PATCHED
    original = target.read_bytes()
    edited = original + HAND_EDIT
    target.write_bytes(edited)

    before = state(workdir)
    refused = orch(project, "run", str(spec), columns="400")
    out = refused.stdout + refused.stderr
    assert refused.returncode == 2, out
    assert target.read_bytes() == edited and state(workdir) == before  # nothing on the host changed
    record = show(project)
    assert record["status"] == "failed" and record["patches"] == [] and "\n" not in record["error"]
    assert f"{host}:{target} was changed by hand since run " in record["error"], record["error"]
    assert f"`orch revert --host {host} --force` puts back what orch left" in record["error"]
    assert "`orch run --accept-drift`" in record["error"] and "nothing was changed" in record["error"]
    assert "+# tuned by hand \\x1b[31mred\\x1b[0m" in out and "\x1b" not in out, out  # the diff, escapes visible

    forced = orch(project, "revert", "--host", host, "--force", columns="400")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "+# tuned by hand" in forced.stdout and f"reverted: {target}" in forced.stdout, forced.stdout
    assert target.read_bytes() == original
    again = orch(project, "run", str(spec), columns="400")
    assert again.returncode == 0, again.stdout + again.stderr
    assert target.read_bytes() == original


def test_accept_drift_records_it_and_patches_the_file_as_it_is(where):
    project, host, workdir = where
    spec = experiment(project, host)
    assert orch(project, "run", str(spec), columns="400").returncode == 0
    target = workdir / PATCHED
    edited = target.read_bytes() + HAND_EDIT
    target.write_bytes(edited)

    [listed] = json.loads(orch(project, "patches", "--json", columns="400").stdout)  # said where orch lists what it changed
    assert (listed["host"], listed["file"], listed["state"]) == (host, str(target), "drifted")
    assert Path(listed["backup"]).read_bytes() == edited[:-len(HAND_EDIT)]  # what orch left, kept
    plain = orch(project, "revert", "--host", host, columns="400")  # without --force: said, left alone
    assert plain.returncode == 1 and "changed since orch's revert left it" in plain.stdout, plain.stdout
    assert target.read_bytes() == edited

    accepted = orch(project, "run", str(spec), "--accept-drift", columns="400")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    record = show(project)
    assert [p["sha256_before"] for p in record["patches"]] == [sha(edited)]  # the file as installed
    [event] = [e for e in record["events"] if e["kind"] == "drift-accepted"]
    assert "orch run --accept-drift" in event["message"] and "+# tuned by hand" in event["message"]
    assert target.read_bytes() == edited  # the revert puts back the file as the run found it

    later = orch(project, "run", str(spec), columns="400")  # the accepted file is what orch left: no drift now
    assert later.returncode == 0, later.stdout + later.stderr
    assert target.read_bytes() == edited


def test_a_dry_run_stops_on_drift_too(project):
    spec = experiment(project, "local")
    assert orch(project, "run", str(spec), columns="400").returncode == 0
    target = project / "host" / PATCHED
    target.write_bytes(target.read_bytes() + HAND_EDIT)
    dry = orch(project, "run", str(spec), "--dry-run", columns="400")
    assert dry.returncode == 2 and "was changed by hand since run" in dry.stderr, dry.stdout + dry.stderr
    assert orch(project, "run", str(spec), "--dry-run", "--accept-drift", columns="400").returncode == 0


def test_a_file_changed_during_a_run_is_drift_for_the_next_one(tmp_path: Path):
    """The journal's drifted record (orch left the file as it found it after the run): the next run's
    check names it; accepting it retires the record, so the file as it is becomes the install."""
    from orchestrator.core.spec import PatchDef
    from orchestrator.host import drift
    from orchestrator.host.journal import DRIFTED

    target = tmp_path / "pkg" / "mod.py"
    target.parent.mkdir()
    target.write_text("x = 1\n")
    patch = PatchDef("dbg", str(target), "e.yaml:1", "x = 1", "insert_after", "print(x)")
    session = _local_session(tmp_path)

    async def go() -> None:
        before, after = await session.journal.prepare(patch, str(target))
        await session.journal.apply("r1", 1, patch, str(target), before, after)
        target.write_text(target.read_text() + "y = 2\n")  # by hand, while patched
        assert [r.state for r in await session.journal.revert("r1")] == [DRIFTED]
        [found] = await drift.find(session, [str(target)])
        assert not found.baseline and found.expected == sha(b"x = 1\n") and "+y = 2" in found.diff
        assert "run r1 patched it (it changed during that run" in found.summary()
        await drift.accept(session, [found])
        assert await session.journal.records() == [] and await drift.find(session, [str(target)]) == []

    asyncio.run(go())


def test_the_diff_is_bounded(tmp_path: Path):
    from orchestrator.host import drift

    lines = drift.bounded_diff(b"", b"".join(b"x" * 500 + b"%d\n" % i for i in range(100)), "/a.py")
    assert len(lines) == drift.DIFF_LINES + 1 and lines[-1].startswith("[... ")
    assert max(len(line) for line in lines) <= drift.DIFF_LINE_CHARS + len(" [...]")


def _local_session(tmp_path: Path):
    from orchestrator.core.inventory import Host
    from orchestrator.host.journal import Journal
    from orchestrator.host.session import HostSession
    from orchestrator.remote.local import LocalConnection

    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
    return HostSession(conn.host, conn, Journal(conn, str(tmp_path / "work")))


def test_revert_force_writes_nothing_when_the_kept_bytes_are_gone(tmp_path: Path):
    """A baseline whose bytes are missing or altered is never written over the file: said, left drifted."""
    from orchestrator.core.spec import PatchDef
    from orchestrator.host import drift
    from orchestrator.host.journal import DRIFTED, REVERTED

    target = tmp_path / "pkg" / "mod.py"
    target.parent.mkdir()
    target.write_text("x = 1\n")
    patch = PatchDef("dbg", str(target), "e.yaml:1", "x = 1", "insert_after", "print(x)")
    session = _local_session(tmp_path)
    said: list[str] = []

    async def go() -> None:
        before, after = await session.journal.prepare(patch, str(target))
        await session.journal.apply("r1", 1, patch, str(target), before, after)
        assert [r.state for r in await session.journal.revert("r1")] == [REVERTED]
        kept, original = session.journal.baseline_paths(str(target))
        assert Path(original).read_bytes() == b"x = 1\n" and Path(kept).is_file()
        target.write_text("x = 2\n")
        [found] = await drift.find(session, [str(target)])
        assert found.baseline and "run r1's revert left it" in found.summary()
        Path(original).write_bytes(b"")  # lost
        [left] = await drift.restore(session, lambda host, text: said.append(text))
        assert left.state == DRIFTED and target.read_text() == "x = 2\n" and "are gone from" in said[-1]

    asyncio.run(go())


def test_another_rehearsal_release_is_not_drift(project):
    """The stand-in's tree replaced by orch itself (the host's `rehearsal:` release changed) holds
    another release's files: no hand edit, so the next run patches it without a word."""
    spec = experiment(project, "local")
    assert orch(project, "run", str(spec), columns="400").returncode == 0
    target = project / "host" / PATCHED
    first = target.read_bytes()
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", 'rehearsal: "0.5.23"'))
    done = orch(project, "run", str(spec), columns="400")
    assert done.returncode == 0, done.stdout + done.stderr
    assert target.read_bytes() != first and "changed by hand" not in done.stdout + done.stderr
