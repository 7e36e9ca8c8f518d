"""The real `sglang.bench_serving` as a run's workload against the rehearsal server: the best test
of the rehearsal's HTTP API there is (streamed /generate, /v1/models, /get_server_info).

The tool is the published wheel's file, laid into the rehearsal tree of its release: 0.4.10.post2
(its module-level imports are aiohttp, numpy, requests, tqdm and transformers, with no torch) and
0.5.9 (those and `datasets`, pillow, pybase64); 0.5.23's `sglang.benchmark.serving` imports
`sglang.srt` modules the stand-in does not have, so it cannot run against it. The host's Python is a
cached venv per release with those packages (~/.cache/orch-test/tool-venv-RELEASE, made once). Offline: `--dataset-name random-ids` (no ShareGPT download) and a word-level tokenizer made
here. Slow (the venv, and transformers' import on the host): `pytest -m slow tests/test_tool_real.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import orch
from support.specs import tool_experiment
from wheels import package_dir

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("ORCH_TEST_CACHE", Path.home() / ".cache" / "orch-test"))
BASE = ("aiohttp", "numpy", "requests", "tqdm", "transformers")  # bench_serving 0.4.10.post2's imports
PACKAGES = {"0.4.10.post2": BASE, "0.5.9": (*BASE, "datasets", "pillow", "pybase64")}
REHEARSAL = {"0.4.10.post2": '"0.4.10"', "0.5.9": '"0.5.9"'}
TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {f"w{i}": i for i in range(512)}
vocab["[UNK]"] = 512
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def tool_python(release: str) -> Path:
    venv = CACHE / f"tool-venv-{release}"
    python, stamp, wanted = venv / "bin" / "python", venv / ".orch-installed", "\n".join(PACKAGES[release])
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES[release]], capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        pytest.skip(f"the tool's imports could not be installed: {done.stderr.strip()[-300:]}")
    stamp.write_text(wanted)
    return python


@pytest.mark.parametrize("release", list(PACKAGES))
def test_real_bench_serving_against_the_rehearsal_server(project, sglang_python, release):
    python = tool_python(release)
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f"rehearsal: {REHEARSAL[release]}")
                         + f"    python: {python}\n")
    subprocess.run([str(python), "-c", TOKENIZER, str(project / "tokenizer")], check=True, timeout=300)
    spec = project / "experiments" / "tool.yaml"
    spec.write_text(tool_experiment({"dataset-name": "random-ids", "num-prompts": 8, "random-input-len": 16,
                                     "random-output-len": 128, "random-range-ratio": 1, "max-concurrency": 4,
                                     "tokenizer": str(project / "tokenizer"), "disable-tqdm": True}))
    checked = orch(project, "check", str(spec))  # installs the rehearsal tree, which has no tool
    assert checked.returncode == 2 and f"SGLang {release} on the host has no such tool" in checked.stdout, checked.stdout
    shutil.copy(package_dir(sglang_python(release)) / "bench_serving.py",
                project / "host" / "rehearsal" / "sglang")
    done = orch(project, "run", str(spec), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = json.loads(orch(project, "show", "last", "--json").stdout)
    metrics = shown["metrics"]
    assert shown["metric_sources"]["accept_len"][0]["source"] == "sglang.bench_serving" and metrics["accept_len"] > 2
    assert metrics["completed"] == 8 and metrics["total_output_tokens"] == 8 * 128  # ignore_eos: every token asked for
    for name in ("median_ttft_ms", "p99_ttft_ms", "p99_itl_ms", "median_e2e_latency_ms", "output_tok_s"):
        assert metrics[name] > 0, name
    output = next(e["message"] for e in shown["events"] if e["kind"] == "tool-output")
    assert "Serving Benchmark Result" in output and "--output-file" in output
