"""The command line's plain values (text, whole numbers, numbers, paths, lists of them) converted
without pydantic: typer 0.29 builds a pydantic TypeAdapter for every option a command is given, and
importing pydantic for that cost each command 0.2 s of its start (of `orch ls`'s 0.4 s).

Only options with no bounds, parser or custom type take this way; every other one (a bounded
port) is converted by typer as before. Typer releases without the lazy
per-option conversion (before 0.29) convert through click and are left as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin
from collections.abc import Callable

TRUE, FALSE = ("1", "true", "t", "yes", "y", "on"), ("", "0", "false", "f", "no", "n", "off")


def install() -> None:
    """Route typer's conversion of plain options through `_Plain` (once; a no-op on older typer)."""
    import typer.core

    original = getattr(typer.core, "build_runtime_param", None)
    if original is None or getattr(original, "plain", False):
        return
    try:  # typer's own modules of 0.29; a release that moved them converts as it always did
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path
    except ImportError:
        return

    def number(kind: type, noun: str) -> Callable[[Any], Any]:
        def convert(value: Any) -> Any:
            if isinstance(value, kind) and not isinstance(value, bool):
                return value
            try:
                return kind(value)
            except (TypeError, ValueError):
                raise BadParameter(f"{value!r} is not {noun}") from None
        return convert

    def text(value: Any) -> str:
        return os.fsdecode(value) if isinstance(value, bytes) else str(value)

    def boolean(value: Any) -> bool:  # what typer's own conversion takes as true and false
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in TRUE or word in FALSE:
            return word in TRUE
        raise BadParameter(f"{value!r} is not true or false")

    converters: dict[Any, Callable[[Any], Any]] = {str: text, int: number(int, "a whole number"),
                                                   float: number(float, "a number"), bool: boolean}

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):  # type: ignore[misc]
        convert: Callable[[Any], Any] = text
        many: bool = False
        path: bool = False

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                if self.many:
                    return [self._one(v, param, ctx) for v in value]
                return self._one(value, param, ctx)
            except BadParameter as exc:
                exc.ctx, exc.param = exc.ctx or ctx, exc.param or param
                raise

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.path:  # a Path already: typer's own checks (exists, file or folder), no pydantic
                found = value if isinstance(value, Path) else Path(text(value))
                return coerce_cli_path(found, self.parameter_info, path_type=Path, param=param, ctx=ctx)
            return self.convert(value)

    def build(descriptor: Any) -> Any:
        info, annotation = descriptor.parameter_info, descriptor.annotation
        many = get_origin(annotation) is list
        leaf = get_args(annotation)[0] if many else annotation
        custom = ("parser", "click_type", "min", "max", "path_type")
        if descriptor.file_annotation is not None or any(getattr(info, k, None) is not None for k in custom):
            return original(descriptor)
        if leaf is Path:
            return _Plain(info, annotation, many=many, path=True)
        if leaf in converters:
            return _Plain(info, annotation, convert=converters[leaf], many=many)
        return original(descriptor)

    build.plain = True  # type: ignore[attr-defined]
    typer.core.build_runtime_param = build  # type: ignore[attr-defined]
