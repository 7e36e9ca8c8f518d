"""A session's kept reads of a host's installed files (`host/reads.py`): read once, and never read
stale after orch changes a file there (a patch applied or reverted, a push, a rehearsal install).
On the shipped fake connection, which counts every host operation."""

from __future__ import annotations

import asyncio
import fnmatch

from orchestrator.core.spec import PatchDef
from orchestrator.host.journal import Journal
from orchestrator.host.session import HostSession
from orchestrator.remote import Completed
from orchestrator.testing import FakeConnection

FILE = "/srv/pkg/mod.py"
ORIGINAL = b"def f():\n    x = 1\n    return x\n"
PATCH = PatchDef("dbg", FILE, "e.yaml:1", "x = 1", "insert_after", "print('[T-DEBUG] x=%d' % x)")


def _records(fake: FakeConnection, command: str) -> Completed:
    """`cat -- ROOT/PATTERN` as the shell answers it: the matching files of the fake host, in order."""
    pattern = command.split(" ")[2].strip("'")
    found = b"".join(data for path, data in sorted(fake.files.items()) if fnmatch.fnmatch(path, pattern))
    return Completed(command, 0, found, b"")


def session() -> tuple[FakeConnection, HostSession]:
    fake = FakeConnection(files={FILE: ORIGINAL})
    fake.script(r"^cat -- ", respond=_records)
    fake.script(r"^realpath ", stdout=f"/srv/pkg\n{FILE}\n".encode())
    return fake, HostSession(fake.host, fake, Journal(fake, fake.host.workdir))


def reads_of(fake: FakeConnection, path: str) -> int:
    return sum(1 for op, target in fake.ops("read_file") if target == path)


def test_reads_are_kept_then_read_afresh_after_a_patch_and_its_revert():
    fake, host = session()
    view = host.reading().conn

    async def go() -> list[bytes]:
        seen = [await view.read_file(FILE), await view.read_file(FILE)]
        assert reads_of(fake, FILE) == 1  # the second came from the kept read
        before, after = await host.journal.prepare(PATCH, FILE)
        await host.journal.apply("r1", 1, PATCH, FILE, before, after)
        seen.append(await view.read_file(FILE))
        await host.journal.revert("r1")
        seen.append(await view.read_file(FILE))
        return seen

    seen = asyncio.run(go())
    assert seen[0] == seen[1] == ORIGINAL
    assert b"[T-DEBUG]" in seen[2]  # the patched text, not the kept original
    assert seen[3] == ORIGINAL  # the reverted text, not the kept patched one


def test_commands_stats_and_resolved_paths_are_emptied_by_a_patch():
    fake, host = session()
    view = host.reading().conn
    listing = "cd /srv/pkg && sha256sum -- mod.py"
    fake.script(r"sha256sum", respond=lambda f, c: Completed(c, 0, f.files[FILE], b""))
    patch = PatchDef("dbg", "pkg:mod.py", "e.yaml:1", "x = 1", "insert_after", "print(x)")
    host.packages["pkg"] = "/srv/pkg"

    async def go() -> tuple[bytes, bytes, int, int]:
        first = (await view.run(listing)).stdout
        await view.run(listing)
        size = (await view.stat(FILE)).size
        assert await host.resolve(patch) == FILE and await host.resolve(patch) == FILE
        assert fake.commands.count(listing) == 1 and len(fake.ops("stat")) == 1
        assert sum(c.startswith("realpath") for c in fake.commands) == 1
        before, after = await host.journal.prepare(PATCH, FILE)
        await host.journal.apply("r1", 1, PATCH, FILE, before, after)
        assert len(host.reads) == 0
        await host.resolve(patch)
        assert sum(c.startswith("realpath") for c in fake.commands) == 2
        return first, (await view.run(listing)).stdout, size, (await view.stat(FILE)).size

    first, again, size, patched_size = asyncio.run(go())
    assert first == ORIGINAL and b"print(x)" not in again and b"[T-DEBUG]" in again
    assert patched_size > size


def test_a_write_through_the_view_empties_it_and_an_answer_read_across_a_change_is_not_kept():
    fake, host = session()
    view = host.reading().conn

    def changed_meanwhile(f: FakeConnection, command: str) -> Completed:
        host.reads.clear()  # as a patch applied by another run while this command ran
        return Completed(command, 0, b"old", b"")
    fake.script(r"^slow-read", stdout=b"new")
    fake.script(r"^slow-read", respond=changed_meanwhile, times=1)  # the newest rule answers first

    async def go() -> None:
        assert (await view.run("slow-read")).stdout == b"old"
        assert (await view.run("slow-read")).stdout == b"new"  # the first answer was not kept
        for text in (b"a", b"a", b"b"):  # a command reading its input: kept per input
            await view.run("compile-stdin", input=text)
        assert [c.data for c in fake.calls if c.target == "compile-stdin"] == [b"a", b"b"]
        await view.read_file(FILE)
        await view.write_file(FILE, b"x = 2\n")
        assert await view.read_file(FILE) == b"x = 2\n"

    asyncio.run(go())
    assert reads_of(fake, FILE) == 2
