"""A rendered launch command read the way the engine's argparse reads it: every option to its
destination and value, whatever wrote it (a param, a literal in the template, an `{% if %}`, an
env variable the script exports). The preflight and the effective-params comparison read this,
never the experiment's param names.

Pure: the engine hands in the words of its server command (after the entrypoint) and its flag table.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Words = Sequence[tuple[str, int]]  # (word, line of the rendered script)
_ENV_REF = re.compile(r"^\$(?:\{(\w+)\}|(\w+))$")


@dataclass(frozen=True)
class Table:
    """What the engine's parser knows of each option string."""

    dests: Mapping[str, str]  # option string -> its destination (`--model` -> model_path)
    switches: frozenset[str] = frozenset()  # take no value (store_true, a `--no-X` form)
    lists: frozenset[str] = frozenset()  # take every value up to the next option (nargs="+")
    negations: frozenset[str] = frozenset()  # set their destination to False (`--no-X`)
    normal: Callable[[str], str] = lambda flag: flag  # how the parser spells a flag before looking it up
    abbreviations: bool = True  # argparse's allow_abbrev: a unique prefix names its option
    known: bool = True  # False: built from the command alone (no engine source to read)

    def option(self, flag: str) -> str | None:
        """The option string `flag` names: itself, its normal form, or the one option it is a
        prefix of; None when it names none (the flag check reports it)."""
        for candidate in dict.fromkeys((flag, self.normal(flag))):
            if candidate in self.dests:
                return candidate
        if not self.abbreviations or not flag.startswith("--"):
            return None
        matches = [o for o in self.dests if o.startswith(flag)]
        return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True)
class Arg:
    dest: str
    value: object  # the text as the shell passes it; True / False for a switch; a list for nargs="+"
    flag: str  # as written
    line: int | None  # of the rendered script


@dataclass(frozen=True)
class Command:
    args: dict[str, Arg] = field(default_factory=dict)
    positionals: tuple[str, ...] = ()

    def get(self, dest: str) -> object:
        arg = self.args.get(dest)
        return arg.value if arg is not None else None

    def values(self) -> dict[str, object]:
        return {dest: arg.value for dest, arg in self.args.items()}


def exported(script: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the script's command sees: `env` (the run's), then each `export NAME=VALUE`
    line of the script in order (what bash expands `$NAME` from)."""
    found = dict(env or {})
    for line in script.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            found[name] = value
    return found


def guessed(words: Words) -> Table:
    """A table from the command alone, for a host whose engine source cannot be read: `--a-b` is
    `a_b`, `--no-a-b` sets `a_b` to False, and an option followed by another option is a switch."""
    dests: dict[str, str] = {}
    switches, negations = set(), set()
    flags = [w.partition("=") for w, _ in words]
    for i, (flag, eq, _) in enumerate(flags):
        if not flag.startswith("--") or flag == "--":
            continue
        name = flag[2:].replace("-", "_")
        if name.startswith("no_"):
            dests[flag] = name[3:]
            negations.add(flag)
            switches.add(flag)
            continue
        dests[flag] = name
        following = flags[i + 1][0] if i + 1 < len(flags) else None
        if not eq and (following is None or following.startswith("--")):
            switches.add(flag)
    return Table(dests, frozenset(switches), frozenset(), frozenset(negations), abbreviations=False, known=False)


def parse(words: Words, table: Table, env: Mapping[str, str] | None = None) -> Command:
    """The options of the command as argparse sets them (the last of a repeated option wins);
    a word that is exactly `$NAME` / `${NAME}` is read from `env`, as the shell expands it."""
    env = env or {}
    texts = [_expanded(w, env) for w, _ in words]
    args: dict[str, Arg] = {}
    positionals: list[str] = []
    i = 0
    while i < len(texts):
        word, line = texts[i], words[i][1]
        i += 1
        if not word.startswith("--") or word == "--":
            positionals.append(word)
            continue
        flag, eq, inline = word.partition("=")
        option = table.option(flag)
        if option is None:
            continue
        if option in table.negations:
            value: object = False
        elif option in table.switches and not eq:
            value = True
        elif eq:
            value = inline
        elif option in table.lists:
            taken = list(_until_option(texts[i:]))
            value, i = taken, i + len(taken)
        elif i < len(texts):
            value, i = texts[i], i + 1
        else:
            value = None
        args[table.dests[option]] = Arg(table.dests[option], value, flag, line)
    return Command(args, tuple(positionals))


def _until_option(texts: Iterable[str]) -> Iterable[str]:
    for text in texts:
        if text.startswith("--"):
            return
        yield text


def expanded(words: Words, env: Mapping[str, str]) -> list[tuple[str, int]]:
    """The words with each `$NAME` / `${NAME}` word read from `env`, as the shell expands it."""
    return [(_expanded(w, env), line) for w, line in words]


def _expanded(word: str, env: Mapping[str, str]) -> str:
    found = _ENV_REF.match(word)
    if found is None:
        return word
    name = found.group(1) or found.group(2)
    return env.get(name, word)


def same(asked: object, effective: object) -> bool:
    """Does the engine's value say what the command asked? The command holds text, the engine
    its parsed value: `8` is 8, `0.85` is 0.85, `eagle3` is EAGLE3 (SGLang upper-cases it)."""
    if isinstance(asked, str) and isinstance(effective, dict):  # a JSON flag (vLLM's --speculative-config)
        try:
            asked = json.loads(asked)
        except ValueError:
            return False
        return isinstance(asked, dict) and all(k in effective and same(v, effective[k]) for k, v in asked.items())
    if isinstance(asked, list) and isinstance(effective, (list, tuple)):
        return len(asked) == len(effective) and all(same(a, e) for a, e in zip(asked, effective))
    if isinstance(asked, bool) or isinstance(effective, bool):
        return bool(asked) == bool(effective) if isinstance(asked, bool) else str(asked).lower() == str(effective).lower()
    if isinstance(effective, (int, float)) and not isinstance(effective, bool):
        try:
            return float(str(asked)) == float(effective)
        except ValueError:
            return False
    if effective is None:
        return asked is None or str(asked).lower() == "none"
    return str(asked).strip().lower() == str(effective).strip().lower()


@dataclass(frozen=True)
class Adjusted:
    """A value the engine changed from what the command asked, and the engine's own line about it."""

    dest: str
    asked: object
    effective: object
    line: str | None  # the log line that says so; None when the engine said nothing

    def message(self) -> str:
        said = f": {self.line.strip()}" if self.line else " (the engine's log says nothing about it)"
        return f"{self.dest}: the command asked {_shown(self.asked)}, the engine ran {_shown(self.effective)}{said}"


# how engines word a change of a value they were given (vLLM 0.32.0 kv_cache_utils.py:2467: `Auto-fit
# max_model_len: full model context length 512 fits ...`, `... reduced from 2048 to 1024 ...`)
_SAYS_CHANGED = re.compile(r"adjust|reset|overrid|rewrit|chang|set to|fall(?:ing)? back|instead|ignor|auto-fit|reduc", re.I)


def adjusted(asked: Mapping[str, object], effective: Mapping[str, object], log: str) -> list[Adjusted]:
    """Each option the command set whose value the engine's print of its arguments says otherwise,
    with the log line naming that option and saying it changed it (the first such line)."""
    lines = log.splitlines()
    found = []
    for dest, value in asked.items():
        if dest not in effective or same(value, effective[dest]):
            continue
        line = next((text for text in lines if dest in text and _SAYS_CHANGED.search(text)
                     and "server_args=" not in text and "non-default args" not in text), None)
        found.append(Adjusted(dest, value, effective[dest], line))
    return found


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
