"""key=value fields of a debug line: `shape=torch.Size([1, 7168]) fc_in=21504` -> {"shape": ..., "fc_in": ...}.

A value runs to whitespace or a comma outside brackets and quotes. One regex takes plain values,
quoted strings and brackets nested two deep; anything deeper (or unbalanced) is walked by hand.
"""

from __future__ import annotations

import re

# A value the regex takes whole: plain text, quoted strings and brackets nested two deep.
_QUOTED = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
_NEST1 = rf"\((?:[^()\[\]{{}}'\"]|{_QUOTED})*\)|\[(?:[^()\[\]{{}}'\"]|{_QUOTED})*\]|\{{(?:[^()\[\]{{}}'\"]|{_QUOTED})*\}}"
_NEST2 = rf"\((?:[^()\[\]{{}}'\"]|{_QUOTED}|{_NEST1})*\)|\[(?:[^()\[\]{{}}'\"]|{_QUOTED}|{_NEST1})*\]|\{{(?:[^()\[\]{{}}'\"]|{_QUOTED}|{_NEST1})*\}}"
# A key never starts inside a word: the lookbehind spares re from retrying every letter of every word.
_FIELD = re.compile(rf"(?<![A-Za-z_])([A-Za-z_][\w.\-]*)=((?:[^\s,()\[\]{{}}'\"]+|{_QUOTED}|{_NEST2})*)")
# The same, with the character after the value (empty at the end): one `findall` per line, no match objects.
_FIELD_AND_NEXT = re.compile(_FIELD.pattern + r"(.?)", re.DOTALL)
_VALUE_ENDS = frozenset(" \t\r\n\f\v,")
_PLAIN = re.compile(r"[^\s,()\[\]{}'\"]*")
_SPECIAL = re.compile(r"[()\[\]{}'\"]")
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def parse_fields(text: str) -> dict[str, str]:
    """key=value pairs; a value runs to whitespace or a comma outside brackets and quotes."""
    found = _FIELD_AND_NEXT.findall(text)
    if all(after in _VALUE_ENDS or not after for _, _, after in found):
        return {key: value for key, value, _ in found}
    return _walk_fields(text)  # a value nested deeper than the regex reaches, or unbalanced


def _walk_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    pos = 0
    while (m := _FIELD.search(text, pos)) is not None:
        end = m.end()
        if end < len(text) and text[end] not in _VALUE_ENDS:  # nested deeper or unbalanced: walk it
            end = _value_end(text, m.start(2))
        fields[m.group(1)] = text[m.start(2):end]
        pos = max(end, m.end(1) + 1)
    return fields


def _value_end(text: str, i: int) -> int:
    n = len(text)
    stack: list[str] = []
    while i < n:
        if not stack:
            i = _PLAIN.match(text, i).end()
            if i >= n or text[i] not in _CLOSER and text[i] not in "'\"":
                return i  # whitespace, a comma, or a stray closer ends the value
        else:
            m = _SPECIAL.search(text, i)
            if m is None:
                return n
            i = m.start()
        c = text[i]
        if c in "'\"":
            i = _quote_end(text, i)
        elif c in _CLOSER:
            stack.append(_CLOSER[c])
            i += 1
        else:
            if c == stack[-1]:
                stack.pop()
            i += 1
    return n


def _quote_end(text: str, i: int) -> int:
    quote, i = text[i], i + 1
    while (j := text.find(quote, i)) >= 0:
        if text[j - 1] != "\\":
            return j + 1
        i = j + 1
    return len(text)


def required_literal(pattern: str) -> str | None:
    """A literal every match of `pattern` contains (the longest top-level run), if one is obvious:
    what finds a debug pattern's lines fast (a literal search first, the regex on those lines only)."""
    try:
        from re import _parser  # the stdlib's own pattern parser; any failure just means "no prefilter"

        parsed = _parser.parse(pattern)
        if parsed.state.flags & re.IGNORECASE:
            return None
        best, run = "", ""
        for op, arg in parsed:
            if op is _parser.LITERAL:
                run += chr(arg)
            else:
                best, run = max(best, run, key=len), ""
        best = max(best, run, key=len)
    except Exception:
        return None
    return best if len(best) >= 3 else None
