"""Log lines as the diagnosis reads them: another program's wrapping taken off, and the parts of a
Python traceback told apart (frames, their source lines, the exception that ends it).

A server started by another tool often reaches its log through that tool's logger, each line
wrapped in the tool's own prefix (`2025-03-08 02:04:48,693 - __main__ - INFO - ...`), a Ray actor's
`(Worker pid=616, ip=10.0.0.1) `, a CI runner's stamp or a terminal UI's frame. Unwrapped, the lines
read as SGLang printed them, and a traceback's frames are indented again where the wrapper kept
their indentation.
"""

from __future__ import annotations

import re

TRACEBACK = "Traceback (most recent call last)"
_CHAINED = ("During handling", "The above exception")
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPERS = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - [\w.<>-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "  # Python logging
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.<>-]+:"  # logging.basicConfig's default format
    r"|\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\] "  # a CI runner's stamp
    r"|\(\w+ pid=\d+(?:, ip=[\d.]+)?\) ?"  # a Ray actor
    r"|[│┃] ?)+"  # a terminal UI's frame
)
_FRAME_RIGHT = re.compile(r"\s*[│┃]\s*$")
FRAME = re.compile(r'\s*File "[^"\n]*", line \d+(?:, in .*)?$')
# The line Python prints last: the exception's (dotted) class name, then ": message" or nothing.
# A CamelCase name (`ValueError`, `torch.OutOfMemoryError`); a lower-case one only with a message
# (`socket.gaierror: ...`), so a bare `raise` is code; an upper-case word (`INFO:`) is a log level.
EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*[a-z]\w*(?::.*)?|[a-z_]\w*:(?: .*)?)$")
_MARKERS = frozenset("~^ ")
# What other programs print around a crash that reads like an exception but never is one: nanobind's
# leak report at exit (`nanobind: leaked 4 instances!`, `- leaked type "triton..."`), Python's
# `Exception ignored in: ...` (a destructor failing at shutdown), warnings (`FutureWarning: ...`)
# and faulthandler's dump of a dying process (`Fatal Python error: Aborted`, `Thread 0x... (most
# recent call first):`, `Current thread 0x...`, `Extension modules: ...`).
NOISE = re.compile(r"\s*(?:nanobind: |- leaked |Exception ignored in|Fatal Python error|(?:Current t|T)hread 0x"
                   r"|Extension modules:)|(?:[\w.]*\.)?\w*Warning:")


def unwrap(line: str) -> str:
    """The line as SGLang printed it: colours, other loggers' prefixes and UI frames removed."""
    if "\x1b" in line:
        line = _COLOURS.sub("", line)
    m = _WRAPPERS.match(line)
    if m is None:
        return line
    line = line[m.end():]
    return _FRAME_RIGHT.sub("", line) if m.group(0).rstrip().endswith(("│", "┃")) else line


def is_frame(line: str) -> bool:
    """A traceback's `File "...", line N, in f` line."""
    return FRAME.match(line) is not None


def is_exception(line: str) -> bool:
    """A line that reads as the exception a traceback ends with (`ValueError: ...`)."""
    return not line.startswith((TRACEBACK, *_CHAINED)) and EXCEPTION.match(line) is not None and not NOISE.match(line)


def exception_line(lines: list[str], start: int) -> str | None:
    """The exception ending the traceback whose header is lines[start], chained ones followed. Frames
    and the source line under each are passed over even where a wrapper took their indentation, and
    so is any other log line printed into the middle of the traceback."""
    last = None
    i, under_frame = start + 1, False
    while i < len(lines):
        line = lines[i]
        i += 1
        if is_frame(line):
            under_frame = True
            continue
        if not line.strip() or line[0] in " \t" or set(line) <= _MARKERS or line.startswith((TRACEBACK, *_CHAINED)):
            continue
        if under_frame and not is_exception(line):  # the frame's source line, unindented by a wrapper
            under_frame = False
            continue
        under_frame = False
        if not is_exception(line):
            continue  # another line of the log, printed between the traceback's lines
        last = line
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].startswith((TRACEBACK, *_CHAINED)):
            i = j
            continue
        break
    return last


def tracebacks(lines: list[str]) -> list[tuple[int, str | None]]:
    """(index of the header, its exception) for every traceback in `lines`, but the ones Python prints
    under `Exception ignored in: ...` (a destructor failing at exit: never what stopped a server)."""
    return [(i, exception_line(lines, i)) for i, line in enumerate(lines)
            if TRACEBACK in line and not (i > 0 and lines[i - 1].startswith("Exception ignored in"))]


def exception_above(lines: list[str], at: int) -> str | None:
    """The nearest exception printed before lines[at]: a cause a server logged ahead of its crash
    header (an earlier traceback's exception, or an exception line of its own)."""
    for i in range(at - 1, -1, -1):
        line = lines[i]
        if TRACEBACK in line:
            found = exception_line(lines, i)
            if found is not None:
                return found
        elif is_exception(line) and not (i > 0 and is_frame(lines[i - 1])):
            return line
    return None
