"""Facts of a host's installed vLLM read from its source with `ast` (never imported, never guessed
from the version string), for the flag check and the EAGLE-3 preflight.

Pure: functions take file texts keyed by their path inside the `vllm` package
(`config/speculative.py`) and return facts. Where the real releases keep them:
- the speculative methods: `SpeculativeMethod = Literal[...]`, nesting other Literals by name
  (0.10.1.1 `config/__init__.py:1903`; 0.33.0 `config/speculative.py:74`, with `EagleModelTypes`,
  `MTPModelTypes` ... above it);
- the `--speculative-config` keys: the fields of `class SpeculativeConfig` (0.10.1.1
  `config/__init__.py:1909`, 0.33.0 `config/speculative.py`);
- the model types EAGLE-3 may target when the release restricts them: `eagle3_target_supported =
  ["llama", "qwen"]` (0.10.1.1 `config/__init__.py:2347`; 0.33.0 has no such list);
- the architecture registry: the dicts of `model_executor/models/registry.py` mapping an
  architecture to `(module, class)` (`_SPECULATIVE_DECODING_MODELS` for drafts; 0.10.1.1 keeps
  `LlamaForCausalLMEagle3` commented out at `registry.py:265`, 0.33.0 registers it at `:702`);
- EAGLE-3 support of a target class: `SupportsEagle3` among its bases, directly or through a base
  class in the same file (0.10.1.1 `models/llama.py` yes, `models/deepseek_v2.py:728` no; 0.33.0
  `deepseek_v2.py:1878` and `kimi_k25.py:297` yes); the runner refuses others (`gpu_model_runner.py`);
- the draft loader `model_executor/models/llama_eagle3.py`: the `"midlayer."` -> `"layers.0."`
  rename (0.10.1.1 `:175-176`, 0.33.0 `:291`), and whether `fc`'s width follows the draft config's
  `eagle_aux_hidden_state_layer_ids` (0.33.0 `:215`) or is fixed at 3 x hidden (0.10.1.1 `:129-136`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

SPEC_FILES = ("config/speculative.py", "config/__init__.py")
REGISTRY = "model_executor/models/registry.py"
DRAFT_LOADER = "model_executor/models/llama_eagle3.py"
MODELS = "model_executor/models/"
DRAFT_REGISTRY = "_SPECULATIVE_DECODING_MODELS"
EAGLE3_INTERFACE = "SupportsEagle3"


def parse(text: str | None) -> ast.Module | None:
    try:
        return ast.parse((text or "").lstrip("\ufeff"))
    except (SyntaxError, ValueError):
        return None


def classes(sources: dict[str, str | None]) -> dict[str, tuple[str, ast.ClassDef]]:
    """Every top-level class of the given files by name (the first file, in path order, wins)."""
    found: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in sorted(sources):
        tree = parse(sources[path])
        for node in tree.body if tree else ():
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, (path, node))
    return found


def fields(index: dict[str, tuple[str, ast.ClassDef]], name: str) -> dict[str, str]:
    """A dataclass's fields (its own and its bases' found in `index`) -> annotation source text."""
    if name not in index:
        return {}
    _, node = index[name]
    out: dict[str, str] = {}
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.update(fields(index, base.id))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            annotation = ast.unparse(stmt.annotation)
            if "ClassVar" not in annotation and "InitVar" not in annotation:
                out[stmt.target.id] = annotation
    return out


def literal_values(sources: dict[str, str | None], name: str) -> tuple[str, ...]:
    """The strings of a module-level `NAME = Literal[...]`, nested Literal aliases expanded."""
    aliases: dict[str, ast.expr] = {}
    for path in sorted(sources):
        tree = parse(sources[path])
        for node in tree.body if tree else ():
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases.setdefault(node.targets[0].id, node.value)

    def expand(expr: ast.expr, seen: frozenset[str]) -> list[str]:
        if isinstance(expr, ast.Subscript) and ast.unparse(expr.value).endswith("Literal"):
            items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            return [v for item in items for v in expand(item, seen)]
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Name) and expr.id in aliases and expr.id not in seen:
            return expand(aliases[expr.id], seen | {expr.id})
        return []

    return tuple(dict.fromkeys(expand(aliases[name], frozenset({name})))) if name in aliases else ()


def speculative_methods(sources: dict[str, str | None]) -> tuple[str, ...]:
    return literal_values({p: sources.get(p) for p in SPEC_FILES}, "SpeculativeMethod")


def speculative_keys(sources: dict[str, str | None]) -> tuple[str, ...]:
    """The keys `--speculative-config` accepts: SpeculativeConfig's fields."""
    return tuple(fields(classes({p: sources.get(p) for p in SPEC_FILES}), "SpeculativeConfig"))


@dataclass(frozen=True)
class Restriction:
    """EAGLE-3 targets restricted to model types whose name contains one of `model_types`."""

    model_types: tuple[str, ...]
    where: str


def eagle3_model_types(sources: dict[str, str | None]) -> Restriction | None:
    for path in SPEC_FILES:
        tree = parse(sources.get(path))
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "eagle3_target_supported"
                                                    for t in node.targets) and isinstance(node.value, ast.List):
                values = tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
                return Restriction(values, f"{path}:{node.lineno}")
    return None


def registry(text: str | None) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """(every architecture, the draft architectures) -> (module, class), from registry.py's dict
    literals of `"Arch": ("module", "Class")` entries."""
    every: dict[str, tuple[str, str]] = {}
    drafts: dict[str, tuple[str, str]] = {}
    tree = parse(text)
    for node in tree.body if tree else ():
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Dict):
            continue
        entries = {k.value: (v.elts[0].value, v.elts[1].value) for k, v in zip(value.keys, value.values)
                   if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) == 2
                   and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts)}
        every.update(entries)
        if target.id == DRAFT_REGISTRY:
            drafts.update(entries)
    return every, drafts


def supports_eagle3(text: str | None, cls: str, path: str = "") -> tuple[bool, str | None]:
    """Whether class `cls` in this file lists SupportsEagle3 among its bases (or inherits it from a
    class of the same file), and where the class is (path:line); (False, None) when not found."""
    index = classes({path: text})
    if cls not in index:
        return False, None

    def has(name: str, seen: frozenset[str]) -> bool:
        if name not in index or name in seen:
            return False
        bases = index[name][1].bases
        return any(ast.unparse(b).split(".")[-1] == EAGLE3_INTERFACE for b in bases) or \
            any(isinstance(b, ast.Name) and has(b.id, seen | {name}) for b in bases)

    return has(cls, frozenset()), f"{path}:{index[cls][1].lineno}"


@dataclass(frozen=True)
class DraftLoader:
    remaps_midlayer: str | None  # path:line of the "midlayer." -> "layers.0." rename; None: no rename
    fc_from_layer_ids: bool  # fc's width = target hidden x len(eagle_aux_hidden_state_layer_ids)


def draft_loader(text: str | None) -> DraftLoader:
    tree = parse(text)
    remap: str | None = None
    from_ids = False
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Constant) and node.value == "midlayer." and remap is None:
            remap = f"{DRAFT_LOADER}:{node.lineno}"
        if isinstance(node, ast.Constant) and node.value == "eagle_aux_hidden_state_layer_ids":
            from_ids = True
    return DraftLoader(remap, from_ids)
