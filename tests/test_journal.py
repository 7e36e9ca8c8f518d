"""The host journal on real files through the local transport."""

import asyncio
from pathlib import Path

import pytest

from orchestrator.core.inventory import Host
from orchestrator.host.journal import DRIFTED, REVERTED, Journal
from orchestrator.remote.local import LocalConnection
from orchestrator.core.spec import PatchDef

ORIGINAL = "def f():\n    x = 1\n    return x\n"
PATCH = PatchDef("dbg", "/abs", "e.yaml:1", "x = 1", "insert_after", "print('[T-DEBUG] x=%d' % x)")


@pytest.fixture
def setup(tmp_path: Path):
    target = tmp_path / "pkg" / "mod.py"
    target.parent.mkdir()
    target.write_text(ORIGINAL)
    target.chmod(0o640)
    cache = target.parent / "__pycache__"
    cache.mkdir()
    (cache / "mod.cpython-311.pyc").write_bytes(b"stale")
    conn = LocalConnection(Host("local", transport="local", workdir=str(tmp_path / "work")))
    return target, Journal(conn, str(tmp_path / "work"))


def run(coro):
    return asyncio.run(coro)


async def apply(journal: Journal, target: Path, run_id="r1", seq=1):
    before, after = await journal.prepare(PATCH, str(target))
    return await journal.apply(run_id, seq, PATCH, str(target), before, after)


def test_apply_then_revert_is_byte_identical_and_keeps_mode(setup):
    target, journal = setup
    record = run(apply(journal, target))
    assert "[T-DEBUG]" in target.read_text()
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert not (target.parent / "__pycache__" / "mod.cpython-311.pyc").exists()
    assert Path(record.backup).read_text() == ORIGINAL
    assert [r.name for r in run(journal.records())] == ["dbg"]
    reverted = run(journal.revert("r1"))
    assert [r.state for r in reverted] == [REVERTED]
    assert target.read_text() == ORIGINAL and oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert run(journal.records()) == []
    assert not Path(record.backup).exists()


def test_drifted_file_is_not_overwritten_until_forced(setup):
    target, journal = setup
    record = run(apply(journal, target))
    target.write_text(target.read_text() + "# edited by hand\n")
    [result] = run(journal.revert("r1"))
    assert result.state == DRIFTED
    assert target.read_text().endswith("# edited by hand\n")
    assert Path(record.backup).read_text() == ORIGINAL
    [again] = run(journal.records())
    assert again.state == DRIFTED
    [forced] = run(journal.revert(force=True))
    assert forced.state == REVERTED and target.read_text() == ORIGINAL


def test_crash_after_record_before_rename_reverts_cleanly(setup):
    """The record exists but the file was never changed: revert finds the 'before' hash."""
    target, journal = setup
    record = run(apply(journal, target))
    target.write_text(ORIGINAL)  # as if the rename never happened
    [result] = run(journal.revert())
    assert result.state == REVERTED and target.read_text() == ORIGINAL
    assert not Path(record.backup).exists()


def test_two_patches_to_one_file_revert_in_reverse_order(setup):
    target, journal = setup
    run(apply(journal, target, seq=1))
    second = PatchDef("ret", "/abs", "e.yaml:2", "return x", "replace", "return x + 1")
    before, after = run(journal.prepare(second, str(target)))
    run(journal.apply("r1", 2, second, str(target), before, after))
    assert "return x + 1" in target.read_text()
    states = [r.state for r in run(journal.revert("r1"))]
    assert states == [REVERTED, REVERTED] and target.read_text() == ORIGINAL


def test_missing_file_changes_nothing(setup, tmp_path):
    _, journal = setup
    from orchestrator.errors import PatchError

    with pytest.raises(PatchError, match=r"local:.*nope.py does not exist"):
        run(journal.prepare(PATCH, str(tmp_path / "nope.py")))
    assert not (tmp_path / "work").exists()


def test_status_tells_applied_pending_and_drifted(setup):
    from orchestrator.host.journal import APPLIED, PENDING

    target, journal = setup
    run(apply(journal, target))
    assert [r.state for r in run(journal.status())] == [APPLIED]
    target.write_text(ORIGINAL)  # as after a crash between restoring and forgetting
    assert [r.state for r in run(journal.status())] == [PENDING]
    target.write_text("something else\n")
    assert [r.state for r in run(journal.status())] == [DRIFTED]


def test_status_of_a_file_patched_twice_is_applied_not_drift(setup):
    """Two patches of one run to one file (the second's before is the first's after): both applied,
    not the first drifted (which stopped a second run of the same set at its drift check)."""
    from orchestrator.host.journal import APPLIED, PENDING

    target, journal = setup
    run(apply(journal, target, seq=1))
    second = PatchDef("dbg2", "/abs", "e.yaml:2", "return x", "insert_after", "print('again')")
    before, after = run(journal.prepare(second, str(target)))
    run(journal.apply("r1", 2, second, str(target), before, after))
    assert [r.state for r in run(journal.status())] == [APPLIED, APPLIED]
    target.write_bytes(before)  # the second reverted, the first not yet (a crash between the two)
    assert [r.state for r in run(journal.status())] == [APPLIED, PENDING]
    target.write_text("edited by hand\n")
    assert [r.state for r in run(journal.status())] == [DRIFTED, DRIFTED]


def test_sweep_and_revert_remove_what_a_killed_writer_left(setup):
    """A saved original without its record (killed between the two) and temporary files beside
    the target or in the journal (killed between write and rename) are removed under the lock."""
    target, journal = setup
    run(apply(journal, target))
    orphan = Path(journal.root) / "r0" / "001.orig"
    orphan.parent.mkdir()
    orphan.write_text(ORIGINAL)
    (Path(journal.root) / "r1" / ".002.json.ab12.orch-tmp").write_text("{")
    stray = target.parent / f".{target.name}.x1y2.orch-tmp"
    stray.write_text("half")
    run(journal.revert())
    run(journal.sweep())
    assert target.read_text() == ORIGINAL and not stray.exists()
    assert list(Path(journal.root).iterdir()) == []
