"""The SQLModel models held to the one declaration of the tables (store/tables.py), when they are
defined: a model whose column, type, nullability, default, key or index differs from its table
there stops orch at import, whatever runs it, instead of a plain path writing another schema.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData
from sqlmodel import SQLModel

from . import tables


def shape_of(model: type[SQLModel]) -> tuple[tuple[tuple[str, str, bool, Any], ...], tuple[str, ...],
                                              frozenset[tables.Index]]:
    """The model's table as tables.shape writes one: a field's default is its pydantic default
    (REQUIRED where it has none, the factory itself where it has one)."""
    table = model.__table__  # type: ignore[attr-defined]
    columns = tuple((c.name, str(c.type), bool(c.nullable), _default(model, c.name)) for c in table.columns)
    key = tuple(c.name for c in table.primary_key.columns)
    indexes = frozenset(tables.Index(str(i.name), tuple(c.name for c in i.columns), bool(i.unique))
                        for i in table.indexes)
    return columns, key, indexes


def _default(model: type[SQLModel], name: str) -> Any:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return field.default_factory
    return tables.REQUIRED if field.is_required() else field.default


def check(metadata: MetaData, models: list[type[SQLModel]]) -> None:
    """Raise RuntimeError unless `models` are exactly the declared tables, each as declared."""
    problems = [f"{name}: in the models, not in store/tables.py" for name in metadata.tables
                if name not in tables.BY_NAME]
    problems += [f"{name}: declared in store/tables.py, no model" for name in tables.BY_NAME
                 if name not in metadata.tables]
    for model in models:
        name = model.__tablename__
        if name in tables.BY_NAME and shape_of(model) != tables.shape(tables.BY_NAME[name]):
            problems.append(f"{name}: the model {shape_of(model)} differs from store/tables.py "
                            f"{tables.shape(tables.BY_NAME[name])}")
    if problems:
        raise RuntimeError("the store's models and store/tables.py disagree: " + "; ".join(problems))
