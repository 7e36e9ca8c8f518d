"""The shipped fake `Connection` (`orchestrator.testing`) and, on it, the order of what orch does on
a host: the journal before the file, the lock before the work, the server stopped before its
patches are reverted, and a failure half-way leaving what `revert` can finish. The same paths run
against a real sshd and the local transport in test_journal.py, test_lock.py and test_crash.py."""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
import shlex
from dataclasses import asdict
from pathlib import Path

import pytest

from orchestrator.core import shell
from orchestrator.errors import HostBusy
from orchestrator.host.journal import APPLIED, DRIFTED, REVERTED, Journal
from orchestrator.host.lock import HostLock
from orchestrator.remote.base import Completed, Connection, Reconnection
from orchestrator.core.spec import PatchDef
from orchestrator.testing import Call, FakeConnection, Reply, UnscriptedCommand

TARGET = "/srv/engine/models/draft.py"
ORIGINAL = b"class Draft:\n    def forward(self, hidden_states):\n        return hidden_states\n"
PATCH = PatchDef("debug", "engine:models/draft.py", "exp.yaml:12", find="def forward(self, hidden_states):",
                 action="insert_after", text="        print('shape', hidden_states.shape)\n")


def go(coroutine):
    return asyncio.run(coroutine)


# --- the fake itself ---


def test_the_fake_has_every_member_of_the_protocol_with_the_same_parameters():
    members = [name for name in vars(Connection) if not name.startswith("_")]
    assert {"run", "read_file", "write_file", "stat", "put_tree", "put_file", "forward", "close"} <= set(members)
    for name in members:
        ours, theirs = getattr(FakeConnection, name), getattr(Connection, name)
        if isinstance(theirs, property):
            assert isinstance(ours, property), name
            continue
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name
        assert inspect.signature(ours).parameters.keys() == inspect.signature(theirs).parameters.keys(), name
    fake = FakeConnection()
    assert fake.host.name == "fake" and fake.home == "/home/orch" and fake.reconnections == ()


def test_the_script_answers_newest_rule_first_for_as_many_times_as_it_says():
    fake = FakeConnection()
    fake.script(r"^echo", stdout=b"old\n")
    fake.script(r"^echo hi", stdout=b"new\n", times=1)
    assert go(fake.run("echo hi")).out == "new\n"
    assert go(fake.run("echo hi")).out == "old\n"  # the newer rule is used up
    assert go(fake.run("ls")) == Completed("ls", 0, b"", b"")  # unscripted: succeeds, prints nothing
    fake.script(r"^false$", respond=lambda f, command: Reply(stderr=b"no\n", exit_status=1))
    assert not go(fake.run("false")).ok
    assert fake.commands == ["echo hi", "echo hi", "ls", "false"]


def test_a_strict_fake_refuses_an_unscripted_command():
    fake = FakeConnection(strict=True)
    fake.script("^true$")
    go(fake.run("true"))
    with pytest.raises(UnscriptedCommand, match="rm -rf /"):
        go(fake.run("rm -rf /"))


def test_files_live_in_memory_with_their_mode_and_a_failure_is_injected_once():
    fake = FakeConnection(files={"/a": b"1"})
    go(fake.write_file("/a", b"22"))
    assert go(fake.read_file("/a")) == b"22" and fake.mode("/a") == 0o644
    go(fake.write_file("/b", b"x", mode=0o600))
    assert go(fake.stat("/b")).mode == 0o600 and go(fake.stat("/c")) is None
    with pytest.raises(FileNotFoundError):
        go(fake.read_file("/c"))
    fake.fail("write_file", "/a", OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        go(fake.write_file("/a", b"333"))
    go(fake.write_file("/a", b"4444"))  # once only
    assert fake.files["/a"] == b"4444"
    assert fake.ops("write_file") == [("write_file", "/a"), ("write_file", "/b"), ("write_file", "/a"),
                                      ("write_file", "/a")]


def test_put_file_resumes_at_an_offset_and_put_tree_copies_a_folder(tmp_path: Path):
    local = tmp_path / "weights.bin"
    local.write_bytes(b"0123456789")
    fake = FakeConnection(files={"/w": b"01234XXXXXXXXXX"})
    moved: list[int] = []
    go(fake.put_file(local, "/w", offset=5, advance=moved.append))
    assert fake.files["/w"] == b"0123456789" and moved == [5]
    assert fake.calls[-1] == Call("put_file", "/w", b"56789")
    (tmp_path / "tree" / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "tree" / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "tree" / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    go(fake.put_tree(tmp_path / "tree", "/r"))
    assert fake.files["/r/pkg/m.py"] == b"x = 1\n" and not any("__pycache__" in p for p in fake.files)


def test_reconnections_forward_and_close_are_recorded():
    fake = FakeConnection()
    fake.reopened.append(Reconnection("2026-01-01T00:00:00Z", "link reset"))
    assert go(fake.forward(30000)) == ("127.0.0.1", 30000)
    go(fake.close())
    assert [r.reason for r in fake.reconnections] == ["link reset"]
    assert fake.ops() == [("forward", "30000"), ("close", "")] and fake.closed


# --- the journal on the fake: what a host's shell would do for the journal's few commands ---


def journal_host(files: dict[str, bytes] | None = None) -> FakeConnection:
    """A fake that answers the journal's record listing and removals from its in-memory files."""
    fake = FakeConnection(files={TARGET: ORIGINAL, **(files or {})})

    def cat(f: FakeConnection, command: str) -> Reply:
        words = shlex.split(command.split(" 2>/dev/null")[0])[2:]
        found = [data for path, data in sorted(f.files.items()) if any(fnmatch.fnmatch(path, w) for w in words)]
        return Reply(stdout=b"".join(found))

    def remove(f: FakeConnection, command: str) -> Reply:
        for path in shlex.split(command.split(";")[0])[3:]:
            f._files.pop(path, None)
        return Reply()

    fake.script(r"^cat -- ", respond=cat)
    fake.script(r"^rm -f -- \S+\.json ", respond=remove)
    return fake


def writes(fake: FakeConnection) -> list[str]:
    return [path for op, path in fake.ops("write_file")]


def test_apply_saves_the_original_and_the_record_before_the_file_changes():
    fake = journal_host()
    journal = Journal(fake, "/home/orch/.orch")
    before, after = go(journal.prepare(PATCH, TARGET))
    record = go(journal.apply("run1", 1, PATCH, TARGET, before, after))
    base = "/home/orch/.orch/journal/run1/001"
    assert writes(fake) == [f"{base}.orig", f"{base}.json", TARGET]
    ops = fake.ops("run", "write_file")
    journal_synced = ops.index(("run", shell.sync_paths("/home/orch/.orch/journal/run1", "/home/orch/.orch/journal")))
    assert ops.index(("write_file", f"{base}.json")) < journal_synced < ops.index(("write_file", TARGET))
    assert fake.files[f"{base}.orig"] == ORIGINAL and fake.mode(f"{base}.orig") == 0o600
    assert json.loads(fake.files[f"{base}.json"])["sha256_after"] == record.sha256_after
    assert b"print('shape'" in fake.files[TARGET] and record.state == APPLIED
    # the target's bytecode and a killed writer's temp files go after the write
    assert ops[-1] == ("run", "; ".join([shell.sync_paths("/srv/engine/models"), shell.remove_pycache(TARGET),
                                         shell.remove_stale_temps(TARGET)]))


def test_a_failure_after_the_patch_is_undone_by_revert_and_the_record_goes():
    fake = journal_host()
    journal = Journal(fake, "/home/orch/.orch")
    go(journal.apply("run1", 1, PATCH, TARGET, *go(journal.prepare(PATCH, TARGET))))
    applied = len(fake.calls)
    # ... the launch fails here; the run's cleanup reverts:
    [done] = go(journal.revert("run1"))
    assert done.state == REVERTED and fake.files[TARGET] == ORIGINAL
    assert not any(p.startswith("/home/orch/.orch/journal/run1/") for p in fake.files)
    after = fake.calls[applied:]
    reads = [c.target for c in after if c.op == "read_file"]
    # the original kept beside the file is hash-checked first, to be renamed back (no new space needed);
    # the fake runs no shell rename, so the file is not back and the journal's copy is written instead
    assert reads[:2] == [TARGET, "/srv/engine/models/.draft.py.orch-original-run1-001"]
    assert "/home/orch/.orch/journal/run1/001.orig" in reads
    assert [c.target for c in after if c.op == "write_file"] == [TARGET]


def test_a_write_that_fails_half_way_leaves_a_record_revert_can_finish():
    fake = journal_host()
    journal = Journal(fake, "/home/orch/.orch")
    fake.fail("write_file", TARGET, OSError("disk full"))
    with pytest.raises(OSError):
        go(journal.apply("run1", 1, PATCH, TARGET, *go(journal.prepare(PATCH, TARGET))))
    assert fake.files[TARGET] == ORIGINAL and "/home/orch/.orch/journal/run1/001.json" in fake.files
    [done] = go(journal.revert("run1"))
    assert done.state == REVERTED and fake.files[TARGET] == ORIGINAL
    assert TARGET not in writes(fake)[3:]  # nothing to restore: the file never changed


def test_a_file_changed_after_the_patch_is_left_alone_and_marked_drifted():
    fake = journal_host()
    journal = Journal(fake, "/home/orch/.orch")
    go(journal.apply("run1", 1, PATCH, TARGET, *go(journal.prepare(PATCH, TARGET))))
    fake.set_file(TARGET, b"someone else's edit\n")
    [done] = go(journal.revert("run1"))
    assert done.state == DRIFTED and fake.files[TARGET] == b"someone else's edit\n"
    assert json.loads(fake.files["/home/orch/.orch/journal/run1/001.json"])["state"] == DRIFTED


# --- the lock on the fake ---


def test_the_lock_is_taken_with_one_command_and_a_live_holder_refuses():
    fake = FakeConnection()
    fake.script(r"noclobber", stdout=f"{shell.LOCK_MARKER} taken\n".encode())
    lock = HostLock(fake, "/home/orch/.orch", "run")
    assert go(lock.acquire()) == []
    assert fake.commands == [shell.lock_take("/home/orch/.orch/lock", json.dumps(asdict(lock.owner), sort_keys=True))]
    go(lock.release())
    assert fake.commands[-1] == shell.lock_release("/home/orch/.orch/lock", lock.owner.token)

    busy = FakeConnection()
    owner = json.dumps({"controller": "elsewhere", "pid": 1, "pid_started": "", "token": "t", "command": "run",
                        "run": "", "started_at": "2026-01-01T00:00:00Z", "lease_s": 60.0})
    busy.script(r"noclobber", stdout=f"{shell.LOCK_MARKER} held 1000 995\n{owner}\n".encode())
    taker = HostLock(busy, "/home/orch/.orch", "run")
    busy_take = json.dumps(asdict(taker.owner), sort_keys=True)
    with pytest.raises(HostBusy, match="busy: .* held by controller elsewhere pid 1"):
        go(taker.acquire())
    assert busy.commands == [shell.lock_take("/home/orch/.orch/lock", busy_take)], "a live holder's lock is never broken"


def test_a_stale_lock_is_broken_with_its_exact_content_and_taken_again():
    fake = FakeConnection()
    owner = json.dumps({"controller": "elsewhere", "pid": 1, "pid_started": "", "token": "t", "command": "run",
                        "run": "", "started_at": "2026-01-01T00:00:00Z", "lease_s": 60.0})
    fake.script(r"noclobber", stdout=f"{shell.LOCK_MARKER} taken\n".encode())
    fake.script(r"noclobber", stdout=f"{shell.LOCK_MARKER} held 1000 100\n{owner}\n".encode(), times=1)
    broken = go(HostLock(fake, "/home/orch/.orch", "run").acquire())
    assert [h.broken_because for h in broken] == ["its lease ran out (900 s since the last renewal, lease 60 s)"]
    assert fake.commands[1] == shell.lock_break("/home/orch/.orch/lock", owner + "\n")
    assert "noclobber" in fake.commands[2]


# --- recovery on the fake: a dead controller's server is stopped before its patches are reverted ---


def test_recovery_stops_the_server_a_dead_run_left_before_reverting_its_patches(tmp_path: Path):
    from orchestrator.host.recovery import recover
    from orchestrator.host.session import HostSession
    from orchestrator.store.database import Store

    fake = journal_host()
    workdir = "/home/orch/.orch"
    go(Journal(fake, workdir).apply("run1", 1, PATCH, TARGET, *go(Journal(fake, workdir).prepare(PATCH, TARGET))))
    fake.set_file(f"{workdir}/runs/run1/pid", b"4242\n")  # its server still up: no exit_code yet
    fake.calls.clear()
    said: list[str] = []
    session = HostSession(fake.host, fake, Journal(fake, workdir))
    recovery = go(recover(session, Store(f"sqlite:///{tmp_path / 'orch.db'}"), lambda host, text: said.append(text)))
    assert [r.state for r in recovery.reverted] == [REVERTED] and fake.files[TARGET] == ORIGINAL
    stopped = fake.commands.index(shell.run_processes(4242, f"{workdir}/runs/run1", "TERM"))
    restored = fake.calls.index(Call("write_file", TARGET, ORIGINAL))
    assert fake.calls.index(Call("run", fake.commands[stopped])) < restored
    assert said[0].startswith("reverting 1 patch(es) left applied by run(s) run1")
    assert "stopped the server run run1 left running (pid 4242)" in said
