"""Which environment values are secrets, and how they are kept out of scripts, logs, the database
and the screen.

A value is secret when its name has a word that says so (`HF_TOKEN`, `OPENAI_KEY`, `DB_PASSWORD`,
`AWS_SECRET_ACCESS_KEY`, `GITHUB_AUTH`, ...) or when the experiment or inventory lists the name
under `secrets:`. The server still receives it, from a 0600 file the launch reads and removes;
everywhere else the value is replaced by `<secret:NAME>`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_WORDS = re.compile(
    r"(?:^|_)(?:[A-Z0-9]*KEYS?|[A-Z0-9]*TOKENS?|SECRETS?|PASS(?:WORD|WD|PHRASE)?|CREDENTIALS?|AUTH|PAT)(?:_|$)", re.I)
MIN_LENGTH = 4  # shorter values ("1", "on") would be hidden everywhere they occur by chance


def is_secret_name(name: str, listed: Iterable[str] = ()) -> bool:
    return name in set(listed) or bool(SECRET_WORDS.search(name))


def secret_values(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """{name: value} for env entries that hold a secret (and are long enough to hide)."""
    names = set(listed)
    return {k: v for k, v in env.items() if is_secret_name(k, names) and len(str(v)) >= MIN_LENGTH}


def public_env(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    """The env without its secrets: what a launch script may hold in clear."""
    hidden = secret_values(env, listed)
    return {k: v for k, v in env.items() if k not in hidden}


def mask_env(env: Mapping[str, str], listed: Iterable[str] = ()) -> dict[str, str]:
    secrets = secret_values(env, listed)
    return {k: (f"<secret:{k}>" if k in secrets else v) for k, v in env.items()}


def _ordered(secrets: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(secrets.items(), key=lambda kv: -len(kv[1]))  # longest first: overlapping values stay hidden


def hide(text: str, secrets: Mapping[str, str]) -> str:
    for name, value in _ordered(secrets):
        text = text.replace(value, f"<secret:{name}>")
    return text


def hide_bytes(data: bytes, secrets: Mapping[str, str]) -> bytes:
    for name, value in _ordered(secrets):
        data = data.replace(value.encode(), f"<secret:{name}>".encode())
    return data


def scrub(value: Any, secrets: Mapping[str, str]) -> Any:
    """`value` (text, bytes, or JSON-like lists and dicts of them) with every secret hidden."""
    if not secrets:
        return value
    if isinstance(value, str):
        return hide(value, secrets)
    if isinstance(value, bytes):
        return hide_bytes(value, secrets)
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v, secrets) for v in value)
    return value


def redact(text: str, env: Mapping[str, str], listed: Iterable[str] = ()) -> str:
    """Replace every secret value of `env` in `text`."""
    return hide(text, secret_values(env, listed))



# Token shapes well-known services issue: hidden in an imported log whatever name they appear under
TOKEN_SHAPES = re.compile(
    rb"\b(?:hf_[A-Za-z0-9]{20,}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
    rb"|github_pat_[A-Za-z0-9_]{30,})")
# The same shapes one pattern each, led by their literal: the regex engine then jumps from one
# occurrence of it to the next (TOKEN_SHAPES' leading \b makes it try every byte: 2 s of a 100 MB log)
_SHAPES = tuple(re.compile(shape) for shape in (
    rb"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{20,}", rb"sk-(?<![A-Za-z0-9_]sk-)(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    rb"gh(?<![A-Za-z0-9_]gh)[pousr]_[A-Za-z0-9]{30,}", rb"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{30,}"))
_WORDS = (b"key", b"token", b"secret", b"pass", b"credential", b"auth", b"pat")
_NAME_WORDS = b"|".join(_WORDS)
_PLAIN_VALUE = re.compile(r"(?:None|True|False|null|true|false|-?[0-9][0-9_.eE+-]*)")


def _named_assignment(listed: Iterable[str]) -> re.Pattern[bytes]:
    """NAME=value, NAME: value, name='value', "name": "value" and --name value, where the name has a
    secret word or is listed; the value is group 4 (inside its quotes, when quoted)."""
    words = b"|".join([_NAME_WORDS, *(re.escape(n.encode()) for n in listed)])
    # not after "<": a <secret:NAME> marker already put in is not a name and a value
    return re.compile(rb"(?<![<A-Za-z0-9_-])(--)?([A-Za-z0-9_-]*?(?:" + words + rb")[A-Za-z0-9_-]*)"
                      rb"(['\"]?\s*[=:]\s*|(?<=[A-Za-z0-9]) +(?=[^\s-]))(['\"]?)([^\s'\",)}\]]+)", re.I)


def mask_log(data: bytes, listed: Iterable[str] = (), env: Mapping[str, str] | None = None,
             shape: bytes | None = None) -> bytes:
    """A server log with every secret hidden: the values of secret env names known here (`env`, the
    shell's), every value assigned to a secret or `listed` name, and every well-known token shape.
    Numbers, None and booleans stay (`max_total_tokens=4096` has a secret word and no secret).

    `shape`: a line that every line of the data is but for other runs of digits and dots in the
    same places, each starting with a digit, as the parser that read the data so tells
    (`LogStream.shape`). A busy server's log is one line over and over with other numbers, where the
    search below would stop at every `token` of every line: that one line then tells whether
    anything is to be hidden."""
    listed = tuple(listed)
    data = hide_bytes(data, secret_values(env or {}, listed))
    if shape is not None and _nothing_to_mask(shape, listed):
        return data
    names = set(listed)

    def assigned(match: re.Match[bytes]) -> bytes:
        dashes, name, sep, quote, value = match.groups()
        key = name.decode(errors="replace")
        if dashes is None and not sep.strip():
            return match.group(0)  # "name value" only counts after --: prose has words followed by words
        if not is_secret_name(key.replace("-", "_"), names) or len(value) < MIN_LENGTH or \
                _PLAIN_VALUE.fullmatch(value.decode(errors="replace")):
            return match.group(0)
        return (dashes or b"") + name + sep + quote + f"<secret:{key}>".encode()

    pattern = _named_assignment(listed)
    data = _mask_candidate_lines(data, listed, lambda line: pattern.sub(assigned, line))
    for token_shape in _SHAPES:
        data = token_shape.sub(_shape_marker, data)
    return data


_SHAPE_LEADS = (b"hf_", b"sk-", b"github_pat_", *(b"gh" + bytes([c]) + b"_" for c in b"pousr"))
_RUN = re.compile(rb"[0-9.]+")
_RUN_FROM_DOT = re.compile(rb"(?<![0-9.])\.")


def _nothing_to_mask(shape: bytes, listed: tuple[str, ...]) -> bool:
    """Whether no line of a log whose every line is `shape` but for its runs of digits and dots has
    anything the rest of `mask_log` hides, told from that line with each run written as "0". What is
    hidden is found by patterns of letters, quotes, separators and values; a run of digits and dots
    enters them only whole (a name's characters stop at a dot; a run starting with a digit reads as
    a number to its end, whatever its length), so a line finds no more than `shape` does. Not told
    where a run starts with a dot (".5" is no number where "0" is one), nor for a listed name with a
    digit or a dot (it could match inside a run)."""
    if _RUN_FROM_DOT.search(shape) or any(c in name for name in listed for c in "0123456789."):
        return False
    shape = _RUN.sub(b"0", shape)
    if any(lead in shape for lead in _SHAPE_LEADS):
        return False
    lowered = shape.lower()
    return not any(candidate.search(lowered) for candidate in _candidates(listed))


def _shape_marker(match: re.Match[bytes]) -> bytes:
    return f"<secret:{match.group(0)[:3].decode()}...>".encode()


def _mask_candidate_lines(data: bytes, listed: tuple[str, ...], mask: Any) -> bytes:
    """`mask` applied only to the lines where a secret word is followed by a separator and a value,
    found in a lowered copy by a case-sensitive search: the full pattern over every line of a 64 MB log
    took 10 s, this takes about 1."""
    lowered = data.lower()  # lower() keeps every offset
    found = sorted(m.start() for candidate in _candidates(tuple(listed)) for m in candidate.finditer(lowered))
    parts: list[bytes] = []
    done = 0
    for at in found:
        if at < done:
            continue  # on a line masked already
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        parts += [data[done:start], mask(data[start:end])]
        done = end
    parts.append(data[done:])
    return b"".join(parts)


@functools.lru_cache(maxsize=16)
def _candidates(listed: tuple[str, ...]) -> tuple[re.Pattern[bytes], ...]:
    """What marks a line `_named_assignment` may change, in the lowered log: a secret word in a name,
    then `=` or `:` and a value that is not a plain number (a stats line's `#token: 4096` is no
    secret: without this every such line is masked one by one), or `--name value`. A value starting
    like a number but going on (`0x1f2e...`, `12ab...`) still counts. One pattern per word, led by
    it: the regex engine jumps between its occurrences (one pattern of all the words would try the
    full match at every byte that starts one: 7 s of a 100 MB log)."""
    words = (*_WORDS, *(re.escape(n.lower().encode()) for n in listed))
    number = rb"(?!-?[0-9][0-9_.e+-]*(?:[\s'\",)}\]]|$))"
    assigned = [re.compile(word + rb"[a-z0-9_-]*['\"]?[ \t]*[=:][ \t]*['\"]?" + number + rb"[^\s'\",)}\]<]")
                for word in words]
    flag = re.compile(rb"--[a-z0-9_-]*(?:" + b"|".join(words) + rb")[a-z0-9_-]* +" + number + rb"[^\s'\",)}\]<-]")
    return (*assigned, flag)


def mask_text(text: str, listed: Iterable[str] = ()) -> str:
    """`mask_log` of one piece of text (a param given on the command line)."""
    return mask_log(text.encode(), listed).decode(errors="replace")
