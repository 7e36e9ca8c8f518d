"""The host's Python: where its packages lie (found without importing them), what it compiles,
and the scripts it runs."""

from __future__ import annotations

from pathlib import PurePosixPath

from . import programs
from .quoting import path, pythonpath_prefix, quote


def package_dir(python: str, package: str, pythonpath: str | None = None) -> str:
    """Print the folder of `package` under `python` without importing it (find_spec on a
    top-level name locates it without executing its `__init__`)."""
    return f"{pythonpath_prefix(pythonpath)}{path(python)} -c {quote(programs.source('package_folder'))} {quote(package)}"


def package_distribution(python: str, folder: str, package: str) -> str:
    """Print the name of the distribution that installed `package` (found in `folder`): its
    dist-info's METADATA `Name:`, which may differ from the package's; nothing when none names one."""
    return f"{path(python)} -c {quote(programs.source('distribution_name'))} {path(folder)} {quote(package)}"


def compile_stdin(python: str) -> str:
    """Compile, with `python`, the sources its stdin holds as JSON `[[key, file name, base64 bytes],
    ...]`, writing nothing (no file, no bytecode); print `[key, line, message]` for each that fails.
    `-S`: the standard library is all it needs, and skipping `site` (its .pth files) halves the start."""
    return f"{path(python)} -S -c {quote(programs.source('compile_sources'))}"


def remove_pycache(source: str) -> str:
    """Remove the bytecode cached for one source file, so Python rereads the patched text."""
    p = PurePosixPath(source)
    cache = p.parent / "__pycache__"
    return f"rm -f -- {path(str(cache))}/{quote(p.stem)}.*.pyc"


def run_python(python: str, script: str, *args: str) -> str:
    return " ".join([path(python), path(script), *(path(a) for a in args)])
