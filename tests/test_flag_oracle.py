"""The real parser as the oracle for the static flag scan: each release's own
`ServerArgs.add_cli_args` builds an argparse parser on a CPU-only torch (no GPU), and every option
string it accepts must be what `flags.scan` reads from the same release's files.

Slow (a cached venv of about 2 GB, made once under ~/.cache/orch-test/flag-oracle): run with
`pytest -m slow tests/test_flag_oracle.py`. A release whose parser does not build here is skipped
with the error it gave.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.engines.sglang import flags
from wheels import wheel

pytestmark = pytest.mark.slow

ORACLE = Path(os.environ.get("ORCH_TEST_CACHE", Path.home() / ".cache" / "orch-test")) / "flag-oracle"
TORCH = "torch==2.13.0"  # the machine image's CPU build; pinned in every install so nothing replaces it
# What `import sglang.srt.server_args` needs in 0.4.10.post2, 0.5.9 and 0.5.23, found by importing
# it (triton is imported, never run). 0.5.9 also imports torchvision, and PyPI's torchvision does not
# import beside the CPU torch ("operator torchvision::nms does not exist"), so 0.5.9 is skipped here.
PACKAGES = (
    "numpy", "orjson", "psutil", "pybase64", "requests", "triton", "packaging", "pillow", "starlette",
    "msgspec", "pydantic", "pyzmq", "tqdm", "ipython", "aiohttp", "safetensors", "openai",
    "partial_json_parser", "huggingface_hub", "transformers", "dill", "sentencepiece", "fastapi",
)
RELEASES = ("0.4.10.post2", "0.5.9", "0.5.23")
OPTIONS = """
import argparse, json
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
print(json.dumps(sorted({option for action in parser._actions for option in action.option_strings})))
"""


def oracle_python() -> Path:
    """The venv's python, with torch (CPU) and the packages installed once."""
    venv = ORACLE / "venv"
    python, stamp = venv / "bin" / "python", venv / ".orch-installed"
    wanted = "\n".join((TORCH, *PACKAGES))
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", TORCH, *PACKAGES],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        pytest.skip(f"the parser's dependencies could not be installed: {done.stderr.strip()[-300:]}")
    stamp.write_text(wanted)
    return python


def release(python: Path, version: str) -> Path:
    """A folder holding that release's `sglang` package (the wheel, --no-deps), for PYTHONPATH."""
    target = ORACLE / f"sglang-{version}"
    if not (target / "sglang").is_dir():
        making = ORACLE / f".making-sglang-{version}-{os.getpid()}"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--target", str(making),
                        str(wheel(version))], check=True, capture_output=True, timeout=600)
        making.replace(target)
    return target


def scanned(folder: Path, version: str) -> frozenset[str]:
    sources = {str(p.relative_to(folder)): p.read_text() for pattern in flags.SOURCE_FILES for p in folder.glob(pattern)}
    return flags.scan(sources, version).options


@pytest.mark.timeout(3600)  # the first time it installs about 2 GB
@pytest.mark.parametrize("version", RELEASES)
def test_the_static_scan_equals_the_real_parser(version):
    python = oracle_python()
    target = release(python, version)
    done = subprocess.run([str(python), "-c", OPTIONS], env={**os.environ, "PYTHONPATH": str(target)},
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"sglang {version}'s parser does not build on a CPU-only torch here: {said[0]}")
    real = set(json.loads(done.stdout.strip().splitlines()[-1]))
    scan = scanned(target / "sglang", version)
    assert scan == real, {"parser only": sorted(real - scan), "scan only": sorted(scan - real)}
    assert {"-h", "--help"} <= real
