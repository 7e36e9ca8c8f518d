"""The typer app of `orch`: its global options, the `hosts` group, and the helpers every command
shares (the settings, JSON, a comma-separated list). Each command module registers on `app` here; the
package's `__init__.py` imports them all and holds `main()`."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

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


# Each command reaches the work through the library face, which loads the heavy modules (the
# database layer, the run lifecycle, SSH) inside its functions; the modules the command modules
# name at their top (output, the comparisons) wait for first use.
_on_first_use("orchestrator.cli.ui", "orchestrator.api.compare")

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


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def _split(values: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (values or "").split(",") if v.strip())
