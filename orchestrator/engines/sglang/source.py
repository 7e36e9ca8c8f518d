"""What a host's installed SGLang does about EAGLE-3, read from its source with `ast` (never
imported, never inferred from its version string), so the preflight says what THIS host will do.

Pure: functions take file texts keyed by their path inside the `sglang` package
(`srt/models/llama.py`; None for a file the host does not have) and return facts naming the
file:line they come from. The real releases hold the same facts in different files and shapes:
- gate: an `if` testing `.is_eagle3()` whose body turns aux capture on (assigns
  `eagle_use_aux_hidden_state = True`, or hands the draft's layer ids to
  `set_eagle3_layers_to_capture`), and whether it then reads `eagle_config.get("use_aux_hidden_state")`;
- ask: how the model runner asks the target for the method: a `hasattr` check that raises with a
  message of its own, or a plain call (then Python's AttributeError);
- registry: the architectures `EntryClass` registers in `srt/models/*.py`;
- embed_head_call: where a speculative worker (`srt/speculative/`) asks the target model for
  `get_embed_and_head()`, a plain call for every EAGLE algorithm (a class without it: AttributeError);
- the default of SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.
The target class's own facts are in classes.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

METHOD = "set_eagle3_layers_to_capture"
EMBED_HEAD = "get_embed_and_head"  # the target's embedding and lm_head, shared with the draft
FLAG = "eagle_use_aux_hidden_state"
USE_AUX = "use_aux_hidden_state"
EXECUTOR = "srt/model_executor/"
SPECULATIVE = "srt/speculative/"
MODELS = "srt/models/"


@dataclass(frozen=True)
class Gate:
    """Aux hidden-state capture is turned on only for `--speculative-algorithm EAGLE3`."""

    where: str  # file:line of the `if`
    honours_use_aux: bool  # the draft's eagle_config.use_aux_hidden_state can turn it off


@dataclass(frozen=True)
class Ask:
    """How the runner asks the target class for the capture method."""

    where: str
    exception: str
    message: str | None  # `{cls}` where the class name goes; None: Python's own AttributeError

    def error(self, cls: str) -> str:
        if self.message is None:
            return f"AttributeError: '{cls}' object has no attribute '{METHOD}'"
        return f"{self.exception}: {self.message.replace('{cls}', cls)}"


@dataclass(frozen=True)
class HostSource:
    """The facts of one host's SGLang that the preflight needs."""

    gate: Gate | None
    ask: Ask | None
    registry: dict[str, str]  # architecture -> file registering it
    quoted: dict[str, str] = field(default_factory=dict)  # unregistered draft arch -> a file naming it
    longer_context: bool | None = None  # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN's default; None: not found
    embed_head_call: str | None = None  # file:line where a speculative worker calls the target's EMBED_HEAD

    def eagle3_drafts(self) -> list[str]:
        """The EAGLE-3 draft classes this host registers (by SGLang's naming: ...Eagle3...)."""
        return sorted(name for name in self.registry if "Eagle3" in name)


def parse(text: str | None) -> ast.Module | None:
    try:
        return ast.parse((text or "").lstrip("\ufeff"))
    except (SyntaxError, ValueError):
        return None


# -- the model runner ---------------------------------------------------------------------------


def gate(sources: dict[str, str | None]) -> Gate | None:
    """The first `if ....is_eagle3():` that turns capture on, in file then line order."""
    for path in sorted(p for p in sources if p.startswith(EXECUTOR)):
        tree = parse(sources[path])
        hits = [n for n in ast.walk(tree) if isinstance(n, ast.If) and _calls(n.test, "is_eagle3")
                and _turns_capture_on(n.body)] if tree else []
        if hits:
            first = min(hits, key=lambda n: n.lineno)
            return Gate(f"{path}:{first.lineno}", any(_reads_use_aux(s) for s in first.body))
    return None


def ask(sources: dict[str, str | None]) -> Ask | None:
    """A `hasattr` check that raises (wherever one exists), else the first plain call."""
    checks: list[tuple[str, int, Ask]] = []
    calls: list[tuple[str, int, Ask]] = []
    for path in sorted(p for p in sources if p.startswith(EXECUTOR)):
        tree = parse(sources[path])
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.If) and _tests_missing(node.test):
                exception = raised(node.body)
                if exception:
                    checks.append((path, node.lineno, Ask(f"{path}:{node.lineno}", *exception)))
            elif is_call_of(node, METHOD):
                calls.append((path, node.lineno, Ask(f"{path}:{node.lineno}", "AttributeError", None)))
    found = sorted(checks or calls, key=lambda item: item[:2])
    return found[0][2] if found else None


def _calls(node: ast.AST, attr: str) -> bool:
    return any(is_call_of(n, attr) for n in ast.walk(node))


def is_call_of(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr


def _turns_capture_on(body: list[ast.stmt]) -> bool:
    for node in (n for s in body for n in ast.walk(s)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is True \
                and any(named(t, FLAG) for t in node.targets):
            return True
        if is_call_of(node, METHOD) and (node.args or node.keywords):  # the draft's layer ids handed over
            return True
    return False


def named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == name) or (isinstance(node, ast.Name) and node.id == name)


def _reads_use_aux(node: ast.AST) -> bool:
    return any(is_call_of(n, "get") and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == USE_AUX
               for n in ast.walk(node))


def _tests_missing(test: ast.AST) -> bool:
    """`not hasattr(x, "set_eagle3_layers_to_capture")`"""
    return (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
            and isinstance(test.operand.func, ast.Name) and test.operand.func.id == "hasattr"
            and len(test.operand.args) == 2 and isinstance(test.operand.args[1], ast.Constant)
            and test.operand.args[1].value == METHOD)


def raised(body: list[ast.stmt]) -> tuple[str, str] | None:
    """(exception name, message) of the first `raise E("...")` in `body`."""
    for node in (n for s in body for n in ast.walk(s)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name) \
                and node.exc.args:
            message = _text(node.exc.args[0])
            if message is not None:
                return node.exc.func.id, message
    return None


def _text(node: ast.AST) -> str | None:
    """A message as the user will read it; a class name put in by an f-string becomes `{cls}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
        else:
            expr = ast.unparse(part.value)  # type: ignore[attr-defined]
            parts.append("{cls}" if expr.endswith("__class__.__name__") or
                         (expr.startswith("type(") and expr.endswith(").__name__")) else "{" + expr + "}")
    return "".join(parts)


# -- the speculative workers --------------------------------------------------------------------


def embed_head_call(sources: dict[str, str | None]) -> str | None:
    """The first `<target ...>.get_embed_and_head()` call under srt/speculative/, in file then line
    order (0.4.10/0.5.9 `self.target_worker.model_runner.model.`, 0.5.23 `target_model.`); the
    draft's own `set_embed_and_head` is another method."""
    for path in sorted(p for p in sources if p.startswith(SPECULATIVE)):
        tree = parse(sources[path])
        lines = sorted(n.lineno for n in ast.walk(tree) if is_call_of(n, EMBED_HEAD)  # type: ignore[attr-defined]
                       and "target" in ast.unparse(n.func.value)) if tree else []  # type: ignore[attr-defined]
        if lines:
            return f"{path}:{lines[0]}"
    return None


CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
CONTEXT_FILES = ("srt/environ.py", "srt/configs/model_config.py")


def longer_context(sources: dict[str, str | None]) -> bool | None:
    """The default of SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: `NAME = EnvBool(False)` in
    srt/environ.py (0.5.x), or `get_bool_env_var("NAME", default="True")` where it is read (0.4.x)."""
    for path in CONTEXT_FILES:
        tree = parse(sources.get(path))
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assign) and any(named(t, CONTEXT_ENV) for t in node.targets) \
                    and isinstance(node.value, ast.Call) and node.value.args \
                    and isinstance(node.value.args[0], ast.Constant):
                return bool(node.value.args[0].value)
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value == CONTEXT_ENV:
                default = next((k.value for k in node.keywords if k.arg == "default"), None)
                if isinstance(default, ast.Constant):
                    return str(default.value).strip().lower() in ("1", "true", "yes", "on")
    return None


# -- the model registry -------------------------------------------------------------------------


def survey(output: str) -> tuple[list[str], dict[str, str]]:
    """`survey.speculative_survey` output -> (model-runner and speculative-worker files to read,
    {model file: its EntryClass lines})."""
    executor, snippets = [], {}
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind in ("X", "S") and rest:
            executor.append("srt/" + rest.removeprefix("./"))
        elif kind == "E" and rest.count("\t") >= 2:
            name, _, text = rest.split("\t", 2)
            snippets[MODELS + name] = snippets.get(MODELS + name, "") + text + "\n"
    return executor, snippets


def registry(snippets: dict[str, str]) -> dict[str, str]:
    """{architecture: file} from each file's last `EntryClass = X` / `EntryClass = [X, Y]`; the
    registered name is the class's own name, which every real release spells in the list."""
    found: dict[str, str] = {}
    for path, text in sorted(snippets.items()):
        names: list[str] = []
        for node in parse(text).body if parse(text) else ():
            if isinstance(node, ast.Assign) and any(named(t, "EntryClass") for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                names = [v.id for v in values if isinstance(v, ast.Name)]
        found.update(dict.fromkeys(names, path))
    return found
