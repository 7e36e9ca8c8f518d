"""An SGLang version's flag set, read from its source without importing it, and the check of a
rendered launch command against it.

Where flags are declared (shared/reference/sglang.md section 5):
- <= 0.5.13: literal `parser.add_argument("--flag", ...)` calls in `srt/server_args.py`;
- 0.5.14-0.5.19: also fields `name: A[T, "help"]` / `name: A[T, Arg(..., cli_name=, aliases=,
  no_cli=True)]` in `server_args.py` (the flag is `--` + name with `-` for `_`);
- >= 0.5.20: those fields live in `srt/arg_groups/fields/*.py`.
A flag registered with a `Deprecated*Action` (or whose help says "Deprecated") is deprecated; one
with `DeprecatedAction(error_message=...)` stops the launch, so it counts as removed. A flag with
`action=argparse.BooleanOptionalAction` also accepts `--no-X` (argparse adds it for each `--` name),
and every parser has `-h/--help`. argparse accepts unique prefixes (`allow_abbrev`), so a prefix of
several flags is an error, as in SGLang.
Pure: callers hand in the source texts and the script text.
"""

from __future__ import annotations

import ast
import difflib
import shlex
from dataclasses import dataclass, field

from orchestrator.engines import command

SOURCE_FILES = ("srt/server_args.py", "srt/arg_groups/fields/*.py")  # relative to the package folder
# Flags SGLang dropped without a stand-in registration; argparse then reads them as a prefix.
KNOWN_REMOVED = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode (removed in 0.5.20; 0.5.14-0.5.19 kept it as a deprecated alias)",
}
HELP = ("-h", "--help")  # argparse's own, on every server parser
ENTRYPOINTS = (("sglang.launch_server",), ("sglang.cli.main", "serve"), ("sglang", "serve"))  # words before the flags


@dataclass(frozen=True)
class FlagSet:
    version: str
    options: frozenset[str]  # every option string the server's parser accepts
    deprecated: dict[str, str] = field(default_factory=dict)  # flag -> what the source says about it
    removed: dict[str, str] = field(default_factory=dict)  # flag -> why the launch would stop
    dests: dict[str, str] = field(default_factory=dict)  # option string -> argparse destination
    switches: frozenset[str] = frozenset()  # options that take no value (store_true, `--no-X`)
    lists: frozenset[str] = frozenset()  # options taking values up to the next option (nargs="+")
    negations: frozenset[str] = frozenset()  # the `--no-X` forms: their destination becomes False

    def as_json(self) -> dict:
        return {"version": self.version, "options": sorted(self.options), "deprecated": self.deprecated,
                "removed": self.removed, "dests": self.dests, "switches": sorted(self.switches),
                "lists": sorted(self.lists), "negations": sorted(self.negations)}

    @classmethod
    def from_json(cls, data: dict) -> FlagSet:
        return cls(data["version"], frozenset(data["options"]), data["deprecated"], data["removed"],
                   data["dests"], frozenset(data["switches"]), frozenset(data["lists"]), frozenset(data["negations"]))

    def table(self) -> command.Table:
        """How this version's parser reads a command (`engines/command.py`)."""
        return command.Table(self.dests, self.switches, self.lists, self.negations)


@dataclass(frozen=True)
class Problem:
    flag: str  # as written in the command
    kind: str  # "unknown" | "ambiguous" | "removed" are errors; "deprecated" | "abbreviated" warn
    line: int | None  # line of the rendered script
    message: str
    closest: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.kind in ("unknown", "ambiguous", "removed")


# ---- the scan ---------------------------------------------------------------------------------

def scan(sources: dict[str, str], version: str) -> FlagSet:
    """The flag set declared in `sources` ({relative path: Python text})."""
    options: set[str] = set(HELP)
    deprecated: dict[str, str] = {}
    removed: dict[str, str] = {}
    dests: dict[str, str] = {}
    switches: set[str] = set()
    lists: set[str] = set()
    negations: set[str] = set()
    for path, text in sorted(sources.items()):
        for found in _declarations(ast.parse(text, filename=path)):
            names, status, note = found.names, found.status, found.note
            options.update(names)
            for name in names:
                dests[name] = found.dest
                if status == "removed":
                    removed[name] = note
                elif status == "deprecated":
                    deprecated[name] = note
            switches.update(names if found.arity == SWITCH else found.negations)
            lists.update(names if found.arity == LIST else ())
            negations.update(found.negations)
    return FlagSet(version, frozenset(options), deprecated, removed, dests, frozenset(switches), frozenset(lists),
                   frozenset(negations))


SWITCH, ONE, LIST = "switch", "one", "list"  # how many values an option takes
SWITCH_ACTIONS = ("store_true", "store_false", "store_const", "count", "BooleanOptionalAction", "help", "version")


@dataclass(frozen=True)
class _Declared:
    names: list[str]
    status: str  # "ok" | "deprecated" | "removed"
    note: str
    dest: str
    arity: str  # SWITCH | ONE | LIST
    negations: tuple[str, ...] = ()  # the `--no-X` forms among `names`


def _dest(names: list[str], keywords: dict[str, ast.expr]) -> str:
    """argparse's destination: `dest=`, else the first long option without its dashes."""
    given = _literal(keywords.get("dest"))
    if isinstance(given, str):
        return given
    long = next((n for n in names if n.startswith("--")), names[0])
    return long.lstrip("-").replace("-", "_")


def _arity(keywords: dict[str, ast.expr]) -> str:
    action = _literal(keywords.get("action")) or _name_of(keywords.get("action")) or ""
    if action in SWITCH_ACTIONS or (str(action).startswith("Deprecated") and "StoreTrue" in str(action)):
        return SWITCH
    nargs = _literal(keywords.get("nargs"))
    if nargs == 0:
        return SWITCH
    return LIST if nargs in ("+", "*") or isinstance(nargs, int) and nargs > 1 else ONE


def _declarations(tree: ast.AST):
    """(option strings, "ok" | "deprecated" | "removed", note) for each flag declared in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            if names:
                keywords = _keywords(node)
                every = _negated(names, keywords)
                yield _Declared(every, *_status(keywords), _dest(names, keywords), _arity(keywords),
                                tuple(every[len(names):]))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found = _annotated_flag(node.target.id, node.annotation)
            if found:
                yield found


def _annotated_flag(name: str, annotation: ast.expr):
    """`name: A[T, "help"]` or `name: A[T, Arg(...)]` -> its flag names, unless `no_cli=True`."""
    if not (isinstance(annotation, ast.Subscript) and _name_of(annotation.value) in ("A", "Annotated")):
        return None
    parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    # srt/arg_groups/arg_utils.py (0.5.23) adds a bool field as store_true, a List[X] one with nargs="+"
    kind = ast.unparse(parts[0]) if parts else ""
    arity = SWITCH if kind in ("bool", "Optional[bool]") else LIST if kind.startswith(("List[", "list[", "Optional[List[")) else ONE
    for meta in parts[1:]:
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            return _Declared(["--" + name.replace("_", "-")], *_status({"help": meta}), name, arity)
        if isinstance(meta, ast.Call) and _name_of(meta.func) == "Arg":
            keywords = _keywords(meta)
            if _literal(keywords.get("no_cli")) is True:
                return None
            cli_name = _literal(keywords.get("cli_name")) or "--" + name.replace("_", "-")
            aliases = _literal(keywords.get("aliases")) or []
            every = _negated([cli_name, *aliases], keywords)
            nargs = _literal(keywords.get("nargs"))
            arity = LIST if nargs in ("+", "*") else arity
            return _Declared(every, *_status(keywords), name, arity, tuple(every[1 + len(aliases):]))
    return None


def _negated(names: list[str], keywords: dict[str, ast.expr]) -> list[str]:
    """The names plus the `--no-X` forms argparse's BooleanOptionalAction registers for them."""
    if _name_of(keywords.get("action")) != "BooleanOptionalAction":
        return names
    return [*names, *("--no-" + n[2:] for n in names if n.startswith("--"))]


def _status(keywords: dict[str, ast.expr]) -> tuple[str, str]:
    action = _name_of(keywords.get("action")) or ""
    help_text = _literal(keywords.get("help"))
    help_text = help_text if isinstance(help_text, str) else ""
    if action == "DeprecatedAction" and "error_message" in keywords:
        return "removed", _literal(keywords["error_message"]) or help_text
    replacement = _literal(keywords.get("new_flag"))
    note = f"use {replacement} instead" if isinstance(replacement, str) else help_text
    if action.startswith("Deprecated") or help_text.lstrip("[(").lower().startswith("deprecated"):
        return "deprecated", note or "deprecated"
    return "ok", ""


def _keywords(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _name_of(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _literal(node: ast.expr | None):
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


# ---- the check --------------------------------------------------------------------------------

def command_words(script: str) -> list[tuple[str, int]]:
    """(word, script line) of each argument of the server command in a launch script, after its
    entrypoint (backslash continuations joined)."""
    lines = script.splitlines()
    i = 0
    while i < len(lines):
        first = i
        while lines[i].endswith("\\") and i + 1 < len(lines):
            i += 1
        i += 1
        words: list[tuple[str, int]] = []
        for number in range(first, i):
            text = lines[number][:-1] if lines[number].endswith("\\") else lines[number]
            try:
                words += [(w, number + 1) for w in shlex.split(text, comments=True)]
            except ValueError:
                words = []
                break
        start = _after_entrypoint([w for w, _ in words])
        if start is not None:
            return words[start:]
    return []


def command_of(script: str, flags: FlagSet | None, env: dict[str, str] | None = None) -> command.Command:
    """The server command's options as this version's parser sets them; without a flag set (no
    SGLang source on the host), as the command itself suggests."""
    words = command_words(script)
    table = flags.table() if flags is not None and flags.dests else command.guessed(words)
    return command.parse(words, table, command.exported(script, env))


def command_flags(script: str) -> list[tuple[str, int]]:
    """(flag, script line) for each `--flag` of the server command in a launch script
    (`python -m sglang.launch_server ...`, `python -m sglang.cli.main serve ...` or `sglang serve ...`,
    with backslash continuations)."""
    lines = script.splitlines()
    i = 0
    while i < len(lines):
        first, logical = i, lines[i]
        while logical.endswith("\\") and i + 1 < len(lines):
            i += 1
            logical = logical[:-1] + " " + lines[i]
        i += 1
        try:
            words = shlex.split(logical, comments=True)
        except ValueError:
            continue
        start = _after_entrypoint(words)
        if start is not None:
            return [(word.split("=", 1)[0], _line_of(lines, first, i, word.split("=", 1)[0]))
                    for word in words[start:] if word.startswith("--") and word != "--"]
    return []


def _after_entrypoint(words: list[str]) -> int | None:
    for n in range(len(words)):
        for entry in ENTRYPOINTS:
            found = tuple(words[n:n + len(entry)])
            if entry == ("sglang", "serve"):  # the console script, maybe by its full path
                found = (found[0].rsplit("/", 1)[-1], *found[1:]) if found else found
            if found == entry:
                return n + len(entry)
    return None


def _line_of(lines: list[str], first: int, end: int, flag: str) -> int | None:
    for number in range(first, end):
        if any(word.split("=", 1)[0] == flag for word in lines[number].split()):
            return number + 1
    return None


def check(script: str, flags: FlagSet) -> list[Problem]:
    """Every flag of the script's server command that this version would reject or warn about."""
    return [p for p in (_check_one(flag, line, flags) for flag, line in command_flags(script)) if p]


def check_option(flag: str, flags: FlagSet) -> Problem | None:
    """What this version's parser would say of one option string (a benchmark tool's argument)."""
    return _check_one(flag, None, flags)


def _check_one(flag: str, line: int | None, flags: FlagSet) -> Problem | None:
    version = f"SGLang {flags.version}"
    if flag in flags.removed:
        return Problem(flag, "removed", line, f"{flag} is no longer accepted by {version}: {flags.removed[flag]}",
                       _closest(flag, flags))
    if flag in flags.deprecated:
        return Problem(flag, "deprecated", line, f"{flag} is deprecated in {version}: {flags.deprecated[flag]}")
    if flag in flags.options:
        return None
    matches = sorted(o for o in flags.options if o.startswith(flag))
    if flag in KNOWN_REMOVED:
        return Problem(flag, "removed", line, f"{flag} was removed; {version} has {KNOWN_REMOVED[flag]}"
                       + (f" (argparse would read it as a prefix of {', '.join(matches)})" if matches else ""),
                       tuple(matches) or _closest(flag, flags))
    if len(matches) > 1:
        return Problem(flag, "ambiguous", line, f"{flag} is an ambiguous prefix in {version}: it could be "
                       f"{', '.join(matches)}; pass the full flag name", tuple(matches))
    if len(matches) == 1:
        return Problem(flag, "abbreviated", line, f"{flag} is an abbreviation of {matches[0]}; pass the full name",
                       tuple(matches))
    return Problem(flag, "unknown", line, f"{version} has no flag {flag}", _closest(flag, flags))


def _closest(flag: str, flags: FlagSet) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(flag, sorted(flags.options), n=3, cutoff=0.6))
