"""Real vLLM sources for tests: the few files orch reads, taken out of the published wheels.

A vLLM wheel is ~400 MB; the tests need about fifty of its .py files. A cached wheel (~/.cache/
orch-test/wheels, as tests/wheels.py keeps SGLang's) is read with zipfile; without one, only the
wheel's central directory and the wanted members are fetched from files.pythonhosted.org with HTTP
range requests (a few MB). Extracted files are cached under ~/.cache/orch-test/vllmsrc/<version>/.
Nothing here imports vllm.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("ORCH_TEST_CACHE", Path.home() / ".cache" / "orch-test"))
WHEELS, SOURCES = ROOT / "wheels", ROOT / "vllmsrc"
RELEASES = ("0.10.1.1", "0.33.0")
MEMBERS = ("vllm/_version.py", "vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py",
           "vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/cli/serve.py", "vllm/config/*.py",
           "vllm/model_executor/models/registry.py", "vllm/model_executor/models/llama_eagle3.py",
           "vllm/model_executor/models/llama.py", "vllm/model_executor/models/deepseek_v2.py",
           "vllm/model_executor/models/kimi_k25.py", "vllm/model_executor/models/interfaces.py")


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests: enough of a file for zipfile."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as answer:
            self.size = int(answer.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buffer) -> int:
        end = min(self.size, self.pos + len(buffer))
        if end <= self.pos:
            return 0
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            data = answer.read()
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _wheel(version: str) -> zipfile.ZipFile:
    cached = sorted(WHEELS.glob(f"vllm-{version}-*.whl"))
    if cached:
        return zipfile.ZipFile(cached[0])
    index = urllib.request.Request("https://pypi.org/simple/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(index, timeout=60) as answer:  # the simple index's JSON form (PEP 691)
        files = json.load(answer)["files"]
    url = next(f["url"] for f in files if f["filename"].startswith(f"vllm-{version}-") and f["filename"].endswith(".whl")
               and "x86_64" in f["filename"])
    return zipfile.ZipFile(io.BufferedReader(RangeFile(url), buffer_size=1 << 20))


def source_tree(version: str) -> Path:
    """The folder holding the wanted files of vllm==version (`<folder>/vllm/...`)."""
    folder = SOURCES / version
    if (folder / ".complete").exists():
        return folder
    try:
        with _wheel(version) as wheel:
            for name in wheel.namelist():
                if any(fnmatch.fnmatch(name, pattern) for pattern in MEMBERS):
                    (folder / name).parent.mkdir(parents=True, exist_ok=True)
                    (folder / name).write_bytes(wheel.read(name))
    except OSError as exc:
        pytest.skip(f"vllm=={version} sources could not be fetched: {exc}")
    (folder / ".complete").write_text("")
    return folder


def sources(version: str, patterns: tuple[str, ...]) -> dict[str, str]:
    """path inside the package -> text, for the files of `version` matching the globs."""
    root = source_tree(version) / "vllm"
    return {str(p.relative_to(root)): p.read_text() for pattern in patterns for p in sorted(root.glob(pattern))}
