"""Apply a patch to file text: find + replace / insert_after / insert_before, or a unified diff.

Pure functions on strings; where the text comes from and goes to is the journal's business.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import textwrap

from orchestrator.errors import PatchError
from .spec import PatchDef

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply(patch: PatchDef, original: str, target: str) -> str:
    """The patched text. `target` (host:path) only names the file in errors."""
    if patch.diff is not None:
        return apply_unified_diff(patch, original, target)
    assert patch.find is not None and patch.text is not None and patch.action is not None
    found = original.count(patch.find)
    if found != patch.count:
        expected = "exactly once" if patch.count == 1 else f"exactly {patch.count} times"
        hint = (
            "the file may be a different version or already patched; check the anchor"
            if found == 0
            else "make `find` longer so it is unique, or set `count:` to the number intended"
        )
        raise PatchError(
            f"{patch.where}: patch '{patch.name}': `find` text occurs {found} times in {target}, "
            f"expected {expected}; {hint}. Nothing was changed."
        )
    if patch.action == "replace":
        return _replace(original, patch.find, patch.text)
    return _insert(original, patch.find, patch.text, after=patch.action == "insert_after")


def _replace(original: str, find: str, text: str) -> str:
    """Replace each occurrence of `find`, the text re-indented to each (see `_reindented`)."""
    out = []
    position = 0
    while (start := original.find(find, position)) != -1:
        line_start = original.rfind("\n", 0, start) + 1
        out.append(original[position:start] + _reindented(text, _indentation(original[line_start:]),
                                                           original[line_start:start]))
        position = start + len(find)
    out.append(original[position:])
    return "".join(out)


def _reindented(text: str, indent: str, lead: str) -> str:
    """`text` as it should stand where the match begins, after `lead` on a line indented `indent`.
    Text whose lines stand left of that indentation (a YAML block scalar strips the common indent:
    `replace: |-` loses the 8 spaces of a method body) was written relative to the match: it is
    dedented and each line re-indented to `indent`, the first one only as far as `lead` has not.
    Text already at that indentation or deeper is kept as written."""
    lines = text.split("\n")
    after_code = bool(lead.strip())  # the match begins after code: its first line sits at `indent`
    first = len(indent) if after_code else len(lead) + len(_indentation(lines[0]))
    widths = ([first] if lines[0].strip() else []) + [len(_indentation(line)) for line in lines[1:] if line.strip()]
    if not widths or min(widths) >= len(indent):
        return text
    head, *rest = textwrap.dedent(text).split("\n")
    head = head if after_code or not head.strip() else indent[len(lead):] + head
    return "\n".join([head, *(indent + line if line.strip() else "" for line in rest)])


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _insert(original: str, find: str, text: str, *, after: bool) -> str:
    """Insert `text` as whole lines after/before each line holding `find`, indented like it."""
    out = []
    position = 0
    while (start := original.find(find, position)) != -1:
        line_start = original.rfind("\n", 0, start) + 1
        end = start + len(find)
        line_end = original.find("\n", end - 1 if find.endswith("\n") else end)
        line_end = len(original) if line_end == -1 else line_end + 1
        anchor_line = original[line_start:line_end]
        indent = anchor_line[: len(anchor_line) - len(anchor_line.lstrip(" \t"))]
        block = _indent_block(text, indent)
        if after:
            tail = "" if anchor_line.endswith("\n") else "\n"
            out.append(original[position:line_end] + tail + block)
        else:
            out.append(original[position:line_start] + block + original[line_start:line_end])
        position = line_end
    out.append(original[position:])
    return "".join(out)


def _indent_block(text: str, indent: str) -> str:
    lines = textwrap.dedent(text).splitlines()
    return "".join((indent + line if line.strip() else "") + "\n" for line in lines)


def apply_unified_diff(patch: PatchDef, original: str, target: str) -> str:
    """Apply a unified diff with exact context (no fuzz); a hunk may sit at another line offset."""
    assert patch.diff is not None
    lines = original.splitlines(keepends=True)
    hunks = _parse_hunks(patch)
    if not hunks:
        raise PatchError(f"{patch.where}: patch '{patch.name}': the diff has no hunks (no '@@' lines)")
    result: list[str] = []
    cursor = 0
    for number, (old_start, old_lines, new_lines) in enumerate(hunks, 1):
        at = _locate(lines, old_lines, max(old_start - 1, 0), cursor)
        if at is None:
            first = old_lines[0].rstrip("\n") if old_lines else ""
            raise PatchError(
                f"{patch.where}: patch '{patch.name}': hunk {number} (at line {old_start}) does not "
                f"apply to {target}: its context {first!r} was not found exactly. Nothing was changed."
            )
        result.extend(lines[cursor:at])
        result.extend(new_lines)
        cursor = at + len(old_lines)
    result.extend(lines[cursor:])
    return "".join(result)


def _parse_hunks(patch: PatchDef) -> list[tuple[int, list[str], list[str]]]:
    """Hunks as (old start line, old lines, new lines); each hunk's header says how many lines
    it holds, so a removed line that starts with '--' is never mistaken for a file header."""
    hunks: list[tuple[int, list[str], list[str]]] = []
    old_left = new_left = 0
    for raw in (patch.diff or "").splitlines(keepends=True):
        header = HUNK_HEADER.match(raw)
        if header and old_left == 0 and new_left == 0:
            old_left = int(header.group(2) or 1)
            new_left = int(header.group(4) or 1)
            hunks.append((int(header.group(1)), [], []))
            continue
        if not hunks:
            continue
        _, old, new = hunks[-1]
        if raw.startswith("\\"):  # "\ No newline at end of file" ends the line before it
            for side in (old, new):
                if side and side[-1].endswith("\n"):
                    side[-1] = side[-1][:-1]
            continue
        if old_left == 0 and new_left == 0:
            continue
        kind, body = raw[:1], raw[1:]
        if kind in (" ", "\n", "\r") or raw in ("\n", "\r\n"):
            body = body if kind == " " else raw
            old.append(body)
            new.append(body)
            old_left, new_left = old_left - 1, new_left - 1
        elif kind == "-":
            old.append(body)
            old_left -= 1
        elif kind == "+":
            new.append(body)
            new_left -= 1
    return hunks


def _locate(lines: list[str], block: list[str], hint: int, floor: int) -> int | None:
    """Where `block` occurs exactly, nearest to `hint`, not before `floor`."""
    if not block:
        return max(hint, floor)
    candidates = [
        i for i in range(floor, len(lines) - len(block) + 1) if lines[i : i + len(block)] == block
    ]
    return min(candidates, key=lambda i: abs(i - hint)) if candidates else None


def unified(before: str, after: str, label: str) -> str:
    """A unified diff of one file, for `orch check` and dry runs."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{label}", f"b/{label}"
        )
    )
