"""Model modules SGLang could not import and skipped.

At startup SGLang imports every module under `sglang.srt.models` and turns an import error into a
warning (0.5.9 `srt/models/registry.py:107`: `Ignore import error when loading {name}: {e}`; 0.4.10
writes `{name}. {e}`; the multimodal processors are loaded the same way), so a model file a patch
broke surfaces only later, as an architecture the server does not support. Harmless ones are common (a module needing a package this host lacks), so
a skipped module is named inside another failure's diagnosis, and is the diagnosis itself when a
patch of the run touched its file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

IMPORT_ERROR = "Ignore import error when loading"
_LINE = re.compile(re.escape(IMPORT_ERROR) + r" ([A-Za-z_][\w.]*?)[:.] (.*)")
_WHERE = re.compile(r"\(([^()]+\.py), line (\d+)\)")  # a SyntaxError's "(kimi_k25.py, line 412)"


@dataclass(frozen=True)
class Skipped:
    module: str  # sglang.srt.models.kimi_k25
    error: str  # what the import raised, as printed
    line: str  # the log line


def skipped_modules(lines: Iterable[str]) -> list[Skipped]:
    """Each module skipped, once (every rank prints its own warning), in the order first printed."""
    found: dict[str, Skipped] = {}
    for line in lines:
        if IMPORT_ERROR in line and (m := _LINE.search(line)) and m.group(1) not in found:
            found[m.group(1)] = Skipped(m.group(1), m.group(2).strip(), line)
    return list(found.values())


def patched_file(module: str, patched: Iterable[str]) -> str | None:
    """The patched file (a host path or PACKAGE:path) that holds `module`, if a patch touched it."""
    tails = (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py")
    for path in patched:
        normal = "/" + path.replace("\\", "/").replace(":", "/").lstrip("/")
        if normal.endswith(tuple("/" + tail for tail in tails)):
            return path
    return None


def error_line(error: str) -> str | None:
    """The line number a SyntaxError names ("unexpected indent (kimi_k25.py, line 412)")."""
    m = _WHERE.search(error)
    return m.group(2) if m else None
