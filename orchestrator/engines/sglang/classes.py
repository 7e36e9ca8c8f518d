"""Whether a host's target class has a method the server asks it for (`set_eagle3_layers_to_capture`,
`get_embed_and_head`), read from its installed SGLang source with `ast`: the class registered under
the architecture's name, defined in that file or imported into it; the method on the class or a
base class; and, where the class's method forwards the call to `self.<inner>.<method>(...)`, the
inner model's class (from `self.<inner> = Class(...)` in `__init__`) must have it too.

Pure: texts keyed by their path inside the `sglang` package (None: the host has no such file);
`support` answers, or names the files it needs read first.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass

from .source import is_call_of, parse, raised

MAX_DEPTH = 8  # bases and delegations followed; real chains are two or three long


@dataclass(frozen=True)
class ClassFacts:
    name: str
    file: str
    line: int
    defines: bool  # defines the method itself
    bases: tuple[str, ...]
    delegate: str | None = None  # the method forwards the call to self.<delegate>
    inner: str | None = None  # the class `__init__` puts in self.<delegate>
    refusal: str | None = None  # what the method raises when that inner model lacks it


@dataclass(frozen=True)
class Support:
    """Whether the target class has the method."""

    arch: str
    file: str | None  # where the class is defined; None: not found
    has: bool | None  # None: the class was not found
    refusal: str | None = None  # the error its own method raises (its inner model lacks the method)
    chain: tuple[str, ...] = ()  # how the answer was found, for the finding's text


@dataclass(frozen=True)
class Need:
    """Files to read before the question can be answered."""

    files: tuple[str, ...]


class _Missing(Exception):
    def __init__(self, files: tuple[str, ...]):
        super().__init__(files)
        self.files = files


def class_facts(text: str | None, name: str, file: str, method_name: str) -> ClassFacts | None:
    tree = parse(text)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None) if tree else None
    if node is None:
        return None
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    bases = tuple(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute)))
    method = methods.get(method_name)
    delegate = next((c.func.value.attr for c in ast.walk(method) if is_call_of(c, method_name)  # type: ignore[attr-defined]
                     and isinstance(c.func.value, ast.Attribute) and _is_self(c.func.value.value)), None) if method else None
    inner = _assigned_class(methods.get("__init__"), delegate) if delegate else None
    exception = raised(method.body) if method and delegate else None
    return ClassFacts(name, file, node.lineno, method is not None, bases, delegate, inner,
                      f"{exception[0]}: {exception[1]}" if exception else None)


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _assigned_class(init: ast.AST | None, attr: str) -> str | None:
    """The class of `self.<attr> = Class(...)` in `__init__`."""
    for node in ast.walk(init) if init else ():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                isinstance(t, ast.Attribute) and t.attr == attr and _is_self(t.value) for t in node.targets):
            func = node.value.func
            return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return None


def imported(text: str | None, name: str, file: str) -> tuple[tuple[str, ...], str] | None:
    """(candidate files, original name) when `file` imports `name` from a module of the package."""
    tree = parse(text)
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    module = _module_path(node.module or "", node.level, file)
                    return ((f"{module}.py", f"{module}/__init__.py"), alias.name) if module else None
    return None


def _module_path(module: str, level: int, file: str) -> str | None:
    if level:
        base = posixpath.dirname(file)
        for _ in range(level - 1):
            base = posixpath.dirname(base)
        return posixpath.join(base, *module.split(".")) if module else base
    parts = module.split(".")
    return "/".join(parts[1:]) if parts[0] == "sglang" and len(parts) > 1 else None


def support(arch: str, registered: dict[str, str], sources: dict[str, str | None], method: str) -> Support | Need:
    """Does the class registered as `arch` define `method`, on itself, a base, or through the
    inner model it delegates to? `Need` names the files to read first."""
    if arch not in registered:
        return Support(arch, None, None)
    try:
        facts = _locate(arch, registered[arch], sources, method, 0)
        if facts is None:
            return Support(arch, None, None)
        has, refusal, chain = _has(facts, sources, method, 0)
    except _Missing as missing:
        return Need(missing.files)
    return Support(arch, facts.file, has, refusal, chain)


def _locate(name: str, file: str, sources: dict[str, str | None], method: str, depth: int) -> ClassFacts | None:
    """The class `name` as seen from `file`: defined there, or imported into it from the package."""
    if file not in sources:
        raise _Missing((file,))
    facts = class_facts(sources[file], name, file, method)
    if facts is not None or depth > MAX_DEPTH:
        return facts
    origin = imported(sources[file], name, file)
    if origin is None:
        return None
    candidates, original = origin
    if any(c not in sources for c in candidates):
        raise _Missing(tuple(c for c in candidates if c not in sources))
    return next((found for c in candidates if sources[c] is not None
                 for found in [_locate(original, c, sources, method, depth + 1)] if found), None)


def _has(facts: ClassFacts, sources: dict[str, str | None], method: str,
         depth: int) -> tuple[bool, str | None, tuple[str, ...]]:
    here = f"{facts.name} ({facts.file}:{facts.line})"
    if facts.defines and facts.delegate and facts.inner and depth <= MAX_DEPTH:
        inner = _locate(facts.inner, facts.file, sources, method, depth + 1)
        if inner is not None:
            has, refusal, chain = _has(inner, sources, method, depth + 1)
            refusal = refusal if has else facts.refusal or refusal or \
                f"AttributeError: '{inner.name}' object has no attribute '{method}'"
            return has, refusal, (f"{here} forwards it to self.{facts.delegate}, a {inner.name}", *chain)
    if facts.defines:
        return True, None, (f"{here} defines it",)
    for base in facts.bases if depth <= MAX_DEPTH else ():
        found = _locate(base, facts.file, sources, method, depth + 1)
        if found is not None:
            has, refusal, chain = _has(found, sources, method, depth + 1)
            if has:
                return True, None, (f"{here} inherits it", *chain)
    return False, None, (f"{here} does not define it",)
