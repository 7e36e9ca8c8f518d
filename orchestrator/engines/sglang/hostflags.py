"""The host's SGLang flag set (read from its files, cached per version) and the check of a rendered
launch script against it: unknown, ambiguous and removed flags stop the run (exit 2) before
anything on the host changes; deprecated and abbreviated ones are reported."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any
from collections.abc import Callable

from orchestrator.core import shell
from orchestrator.host.push import cache_root
from orchestrator.host.session import package_dir, package_version
from . import PACKAGE, VERSION_FILES
from . import flags, tools
from orchestrator.engines.base import ToolCommand
from orchestrator.errors import SpecError

Report = Callable[[str, str], None]
JINJA_TAG = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")
JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)


def cache_dir() -> Path:
    return cache_root() / "flags"


async def flag_set(conn: Any, host: Any, packages: dict[str, str],
                   patterns: tuple[str, ...] = flags.SOURCE_FILES) -> flags.FlagSet | None:
    """The flag set declared in the host's SGLang files matching `patterns` (the server's, or a
    benchmark tool's: `tools.py`); None when the host has none; one round trip when cached."""
    folder = await package_dir(conn, host, packages, PACKAGE)
    if folder is None:
        return None
    listing = (await conn.run(shell.flag_sources(folder, patterns))).out
    hashes = sorted(line.split(None, 1)[::-1] for line in listing.splitlines() if line.strip())
    if not hashes:
        return None
    version = await package_version(conn, folder, VERSION_FILES)
    key = hashlib.sha256(json.dumps(hashes).encode()).hexdigest()[:16]
    # `d2`: the set holds each option's destination and arity; a cache file from before lacks them
    cached = cache_dir() / f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', version)}-{key}.d2.json"
    if cached.is_file():
        return flags.FlagSet.from_json(json.loads(cached.read_text()))
    sources = {path: (await conn.read_file(f"{folder}/{path}")).decode(errors="replace") for path, _ in hashes}
    found = flags.scan(sources, version)
    cached.parent.mkdir(parents=True, exist_ok=True)
    temporary = cached.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(found.as_json()))
    temporary.replace(cached)  # atomic: parallel runs never read half a file
    return found


async def tool_command(conn: Any, host: Any, packages: dict[str, str], name: str, args: dict[str, object],
                       port: int, result: str) -> ToolCommand:
    """The host's release's module of the benchmark tool `name` and its arguments, each checked
    against the tool's parser read from the host's files (SpecError naming a bad one)."""
    tool = tools.find(name)
    folder = await package_dir(conn, host, packages, PACKAGE)
    if folder is None:
        raise SpecError(f"{host.name}: workload.tool {name}: no SGLang installed under {host.python}")
    listing = (await conn.run(shell.flag_sources(folder, tools.candidates()), idempotent=True)).out
    present = {line.split(None, 1)[1].strip() for line in listing.splitlines() if line.strip()}
    version = await package_version(conn, folder, VERSION_FILES)
    module, file = tools.module_of(tool, present, version)
    found = await flag_set(conn, host, packages, (file, *tool.sources))
    assert found is not None  # the listing just found the file
    words, warnings = tools.argv(tool, args, port, result, found, module)
    return ToolCommand(module, words, tuple(warnings))


async def check_launch(conn: Any, host: Any, packages: dict[str, str], script: str, template: Path,
                       report: Report, label: str) -> None:
    """Raise SpecError (exit 2) naming the first bad flag, where it is and the closest valid ones;
    report the warnings."""
    found = await flag_set(conn, host, packages)
    if found is None:
        return
    problems = flags.check(script, found)
    for p in problems:
        if not p.is_error:
            report(label, f"warning: {_where(p, template, script)}: {p.message}")
    errors = [p for p in problems if p.is_error]
    if errors:
        first = errors[0]
        closest = f"; closest: {', '.join(first.closest)}" if first.closest else ""
        more = f" (and {len(errors) - 1} more: {', '.join(p.flag for p in errors[1:])})" if len(errors) > 1 else ""
        raise SpecError(f"{host.name}: {_where(first, template, script)}: {first.message}{closest}{more}; nothing on the "
                        f"host was changed")


def findings(problems: list[flags.Problem], template: Path, script: str) -> list[dict[str, str]]:
    """Problems in the shape `orch check` prints (severity, code, what, why, fix)."""
    return [{"severity": "error" if p.is_error else "warning", "code": f"flag-{p.kind}",
             "what": f"{_where(p, template, script)}: {p.flag}", "why": p.message,
             "fix": f"use {' or '.join(p.closest)}" if p.closest else "remove it or check `--help` of this version"}
            for p in problems]


def _where(problem: flags.Problem, template: Path, script: str) -> str:
    """The template line that renders the script's line holding the flag, else that script line.
    A comment, or another line that only mentions the flag, never renders the command's line."""
    lines = script.splitlines()
    if not problem.line or problem.line > len(lines):
        return "launch script"
    try:
        text = JINJA_COMMENT.sub(lambda m: "\n" * m.group().count("\n"), template.read_text())
    except OSError:
        text = ""
    for number, line in enumerate(text.splitlines(), 1):
        if _renders(line, lines[problem.line - 1]) and re.search(
                rf"(?<![\w-]){re.escape(problem.flag)}(?![\w-])", JINJA_TAG.sub(" ", line)):
            return f"{template}:{number}"
    return f"launch script line {problem.line}"


def _renders(template_line: str, rendered: str) -> bool:
    """Could this template line have rendered that line? Its literal text in order, any value
    where it has `{{ }}` or `{% %}`."""
    parts = JINJA_TAG.split(template_line.strip())
    pattern = ".*".join(r"\s+".join(map(re.escape, part.split())) if part.strip() else "" for part in parts)
    return re.fullmatch(pattern, rendered.strip()) is not None
