"""orch's own modules read with `ast`, for the tests of its layers and its import graph: each
module's dotted name, its package, and what its text imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "orchestrator"
STAND_IN_TREES = ("orchestrator", "rehearsal", "trees")  # programs copied to hosts: not orch modules


@dataclass(frozen=True)
class Module:
    name: str  # dotted: orchestrator.host.push
    where: str  # path shown in messages: orchestrator/host/push.py
    tree: ast.Module
    is_package: bool  # an __init__.py

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def parse(where: str, source: str) -> Module:
    """A module from its path under the repository (orchestrator/...) and its text."""
    parts = where.removesuffix(".py").split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return Module(".".join(parts), where, ast.parse(source, where), is_package)


def orch_modules() -> list[Module]:
    """Every module of orchestrator/, the stand-ins' trees aside."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if relative.parts[:len(STAND_IN_TREES)] == STAND_IN_TREES:
            continue
        found.append(parse(relative.as_posix(), path.read_text()))
    return found


def is_module(dotted: str) -> bool:
    """A module or package of the repository has this dotted name."""
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(module: Module) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of everything `module` imports, relative imports resolved; for
    `from X import y` the submodule X.y where there is one, else X."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if base.startswith("orchestrator") and is_module(sub) else base), node.lineno
