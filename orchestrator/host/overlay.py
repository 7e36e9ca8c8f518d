"""A run's own patched copy of the engine's packages, first on its PYTHONPATH: the installed files
stay untouched (GPU slots, `run/slots.py`: runs with different patch sets on one host at once).

The copy lives in the run's folder, `<run dir>/site/<package>/`: a tree of real folders in which
every file is a symlink to the installed one (so building it costs one `cp -rs`, not the package's
bytes), except the files the run patches, which are real files holding the patched text. Python
keeps the symlink's path as a module's `__file__`, so relative imports stay inside the copy, and
the bytecode it writes goes to the copy's own `__pycache__` folders; the cached bytecode of a
patched file (a symlink to the installed file's) is removed, so Python compiles the patched text.

Only a patch whose target is `PACKAGE:relative/path` can go to a copy; a run with a patch to an
absolute path changes the installed file (the journal) and shares its host only with runs of the
same patch set. Removing the copy is the whole revert. A copy a crash left behind changes nothing
installed and goes with its run folder (`orch clean`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.core import shell
from orchestrator.core.spec import PATCHED_SITE, PatchDef
from orchestrator.remote import Connection
from orchestrator.remote.base import command_failed

PARAM = PATCHED_SITE  # the run's copy (its folder on PYTHONPATH), a param like the slot's `gpus` and `port`
FOLDER = "{{ run.dir }}/site"  # the param's value before rendering


def isolatable(patches: Iterable[PatchDef]) -> bool:
    """Every patch targets a file of a Python package (`PACKAGE:relative/path`), not an absolute path."""
    return all(package_of(p) is not None for p in patches)


def package_of(patch: PatchDef) -> str | None:
    """The top-level package a patch's target is in; None for an absolute path."""
    package, sep, relative = patch.file.partition(":")
    if not sep or patch.file.startswith("/") or not relative:
        return None
    return package.split(".")[0] or None


@dataclass(frozen=True)
class Overlay:
    site: str  # the folder on PYTHONPATH
    packages: dict[str, str]  # package name -> its installed folder
    files: dict[str, str]  # installed file -> its own copy in the overlay


def copy_path(site: str, packages: dict[str, str], installed: str) -> str:
    """Where `installed` (a file under one of `packages`' folders) is in the overlay."""
    for name, folder in packages.items():
        if installed.startswith(folder.rstrip("/") + "/"):
            return f"{site}/{name}/{installed[len(folder.rstrip('/')) + 1:]}"
    raise ValueError(f"{installed} is not under any of {sorted(packages.values())}")


async def build(conn: Connection, site: str, packages: dict[str, str], texts: dict[str, bytes]) -> Overlay:
    """The overlay of `packages` under `site`, each file of `texts` (installed path -> text) a
    real file of its own there. Writes only under `site`."""
    done = await conn.run(shell.overlay_packages(site, packages), timeout=300, idempotent=True)
    if not done.ok:
        said = (done.err or done.out).strip().splitlines()[-1:] or ["no output"]
        raise command_failed(done, f"{conn.host.name}: could not build the run's patched copy of "
                                   f"{', '.join(packages)} under {site}: {said[0]}; the host needs GNU cp (`cp -rs`)")
    files = {installed: copy_path(site, packages, installed) for installed in texts}
    if files:
        await conn.run(shell.unlink_for_copy(*files.values()), idempotent=True)
    for installed, text in texts.items():
        await conn.write_file(files[installed], text)
    return Overlay(site, dict(packages), files)


async def remove(conn: Connection, site: str) -> None:
    """The overlay gone (its symlinks, not what they point to)."""
    await conn.run(shell.remove_tree(site), idempotent=True)
