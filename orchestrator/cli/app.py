"""The typer app of `orch`: its global options, the `hosts` group, and the helpers every command
shares (the database, the inputs of a run). Each command module registers on `app` here; the
package's `__init__.py` imports them all and holds `main()`."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .coercion import install as _plain_options

_plain_options()  # plain option values converted without pydantic (0.2 s of every command's start)

def _on_first_use(*names: str) -> None:
    """These modules load when a command first touches them, not when the commands register, so
    `orch --help` and each command read only what they use (the standard library's LazyLoader)."""
    for name in names:
        if name in sys.modules:
            continue
        found = importlib.util.find_spec(name)
        assert found is not None and found.loader is not None, name
        found.loader = importlib.util.LazyLoader(found.loader)
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        found.loader.exec_module(module)
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)  # `from parent import child` then finds it unloaded


# Each command imports the heavy modules (the database layer, the run lifecycle, SSH) inside it; the
# ones the command modules name at their top (output, specs, comparisons) wait for first use.
_on_first_use("orchestrator.cli.ui", "orchestrator.core.inventory", "orchestrator.core.spec",
              "orchestrator.core.diff", "orchestrator.core.compare", "orchestrator.run.plankey",
              "orchestrator.engines", "orchestrator.api.compare")
from orchestrator.core import inventory as inventories, spec as specs  # noqa: E402

if TYPE_CHECKING:
    from orchestrator.store.database import Store
    from orchestrator.store.reading import Reader

# Plain help and usage errors (no rich_markup_mode): rich would cost `orch --help` a third of its time
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Run LLM-serving experiments on GPU hosts and keep an exact record of every run.")
hosts_app = typer.Typer(help="The hosts of the inventory.", invoke_without_command=True, rich_markup_mode=None)
app.add_typer(hosts_app, name="hosts")


# `--set` of run, check and render: what a value on the command line becomes (spec.literal)
SET_HELP = ("Override a param: key=value, or env.NAME=value. The value is text as written (not YAML: `/m #v2`, "
            "`~` and `0x10` stay text); only a plain decimal number (8, 0.85) and true/false become a number "
            "and a boolean.")


class Settings:
    db: str = "sqlite:///orch.db"
    inventory: Path = Path("inventory.yaml")


settings = Settings()


@app.callback()
def main_options(
    db: str | None = typer.Option(None, "--db", help="Database URL (default: $ORCH_DB or sqlite:///orch.db)."),
    inventory: Path | None = typer.Option(None, "--inventory", help="Inventory file (default: $ORCH_INVENTORY or ./inventory.yaml)."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=lambda value: _version(value),
                                 help="Print orch's version and exit."),
) -> None:
    settings.db = db or os.environ.get("ORCH_DB") or "sqlite:///orch.db"
    settings.inventory = inventory or Path(os.environ.get("ORCH_INVENTORY") or "inventory.yaml")


def _version(value: bool) -> None:
    from .completing import print_version

    print_version(value)


def _store() -> Store:
    from orchestrator.store.database import Store

    return Store(settings.db)


def _reader() -> Reader:
    """The database for a reading command: plain DB-API, no SQLAlchemy (store/reading.py)."""
    from orchestrator.store import reading

    return reading.open_url(settings.db)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def _split(values: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (values or "").split(",") if v.strip())


def _load(spec_path: Path, hosts: str | None, overrides: list[str], variants: list[str]):
    from orchestrator.core import plancheck

    spec = specs.load(spec_path)
    inv = inventories.load(settings.inventory)
    plancheck.check_template_place(spec, inv.template_folders)
    plans = specs.expand(spec, overrides, tuple(variants))
    plancheck.check(spec, plans, overrides)
    chosen = inv.select(_split(hosts) or spec.hosts)
    return spec, plans, chosen
