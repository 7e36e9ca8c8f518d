"""Every patched Python file is compiled by the host's own Python before anything changes.

SGLang imports every model module at startup and turns an import error into a warning (`Ignore
import error when loading sglang.srt.models.X`), so a patch that breaks a model file's syntax would
surface minutes later, after the target has loaded, as an unsupported draft architecture. The
patched text goes to the host's Python on stdin (its grammar, its version) and is compiled there in
memory: nothing is written on the host. One call per run for all its patched files.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from orchestrator.core import shell
from orchestrator.core.inventory import Host
from orchestrator.errors import PatchCompileError, PatchError
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed
from orchestrator.core.spec import PatchDef

Prepared = tuple[PatchDef, str, bytes, bytes]  # patch, file on the host, text before, text after
WHY = "an engine may skip a model module that fails to import, with only a warning: the models it defines go missing"


@dataclass(frozen=True)
class Broken:
    patch: PatchDef  # the patch after which the file stopped compiling
    file: str
    line: int | None
    message: str  # "SyntaxError: ..." as the host's Python says it

    def where(self, host: str) -> str:
        return f"{host}:{self.file}" + (f":{self.line}" if self.line else "")


async def broken(conn: Connection, host: Host, prepared: list[Prepared]) -> list[Broken]:
    """The patched `.py` files the host's Python cannot compile. Each state of a file (after each
    of its patches, in order) is compiled, so the patch to blame is the one from which it fails."""
    states = [(i, file, after) for i, (_, file, _, after) in enumerate(prepared) if file.endswith(".py")]
    if not states:
        return []
    payload = json.dumps([[i, file, base64.b64encode(after).decode()] for i, file, after in states]).encode()
    done = await conn.run(shell.compile_stdin(host.python), input=payload, timeout=120, idempotent=True)
    if done.exit_status == 127:
        raise PatchError(f"{host.name}: python {host.python} not found; set the host's `python:` in the inventory")
    if not done.ok:
        said = (done.err or done.out).strip().splitlines()[-1:] or ["no output"]
        raise command_failed(done, f"{host.name}: {host.python} could not check the patched files: {said[0]}")
    failed = {row[0]: (row[1], row[2]) for row in map(json.loads, _rows(done.out))}
    by_file: dict[str, list[int]] = {}
    for i, file, _ in states:
        by_file.setdefault(file, []).append(i)
    found = []
    for file, keys in by_file.items():
        if keys[-1] not in failed:
            continue
        culprit = keys[-1]
        for key in reversed(keys):  # back to the first state of the failing run of states
            if key not in failed:
                break
            culprit = key
        line, message = failed[keys[-1]]  # as the server would meet the file
        found.append(Broken(prepared[culprit][0], file, line, message))
    return found


def _rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[")]


async def ensure_compiles(conn: Connection, host: Host, prepared: list[Prepared]) -> None:
    """Raise PatchCompileError naming the patch, the file and the line of the first broken file."""
    found = await broken(conn, host, prepared)
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more: {', '.join(b.file for b in found[1:])})" if len(found) > 1 else ""
        raise PatchCompileError(
            f"{first.patch.where}: patch '{first.patch.name}': {first.where(host.name)}: {first.message}: the "
            f"patched file does not compile with {host.python}; {WHY}{more}. Fix the patch's text; nothing was changed.")


def findings(found: list[Broken], host: Host) -> list[dict[str, str]]:
    """In the shape `orch check` prints."""
    return [{"severity": "error", "code": "patch-does-not-compile",
             "what": f"{b.patch.where}: patch '{b.patch.name}': {b.where(host.name)}: {b.message}",
             "why": f"the patched file does not compile with {host.python}; {WHY}",
             "fix": "fix the patch's text (`orch run --dry-run` shows it as a diff)"} for b in found]
