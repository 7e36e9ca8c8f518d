"""End to end with vLLM: the real `orch` command runs experiments/vllm_eagle.yaml on the rehearsal
host (locally and over a real sshd), the rehearsal vLLM as a real process, a real SQLite file;
`orch diff` of an SGLang run against a vLLM run of the same draft; `orch import` of a vLLM log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sshd
from conftest import ROOT, free_port
from orchestrator.rehearsal import vllm as rehearsal
from support.cli import orch
from support.files import snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


@pytest.fixture
def vllm_project(project: Path) -> Path:
    """The test project with the vLLM template and both experiments."""
    shutil.copy(ROOT / "templates" / "vllm_launch.sh.j2", project / "templates" / "vllm_launch.sh.j2")
    for name in ("vllm_eagle.yaml", "eagle_debug.yaml"):
        shutil.copy(ROOT / "experiments" / name, project / "experiments" / name)
    return project


def shipped_vllm(tmp_path: Path) -> dict[str, str]:
    """The default release's stand-in tree as orch assembles it."""
    return snapshot(rehearsal.assemble(rehearsal.DEFAULT_RELEASE, tmp_path / "shipped-vllm"))


def record(project: Path, run: str) -> dict:
    return json.loads(orch(project, "show", run, "--json").stdout)


def accept_lengths(rec: dict) -> dict[str, float]:
    """The run's accept_len by source."""
    return {m["source"]: m["value"] for m in rec["metric_sources"]["accept_len"]}


def check_vllm_runs(project: Path, hosts: str, workdir: Path, tmp_path: Path) -> None:
    """Both variants succeeded with the accept lengths each draft gives, from /metrics and the log."""
    done = orch(project, "run", "experiments/vllm_eagle.yaml", "--hosts", hosts, "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installing the rehearsal vllm" in done.stdout
    runs = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["status"]) for r in runs] == [("eagle3", "succeeded"), ("absolute-d2t", "succeeded")]
    healthy, absolute = record(project, str(runs[0]["id"])), record(project, str(runs[1]["id"]))
    good, bad = accept_lengths(healthy), accept_lengths(absolute)
    assert set(good) == set(bad) == {"prometheus", "spec_decode_log"}
    assert all(2.5 < v < 3.5 for v in good.values()), good  # 3 speculative tokens, ~70% accepted each
    assert all(v < 1.1 for v in bad.values()), bad
    assert healthy["metrics"]["accept_len"] == good["prometheus"]  # the headline: the counters over the workload
    assert healthy["flags"] == [] and "draft-rejected" in absolute["flags"]
    for rec in (healthy, absolute):
        spec_lines = [p for p in rec["series"] if p["kind"] == "spec_decode"]
        assert spec_lines and all("mean_accept_len" in p for p in spec_lines)
        assert all(p["state"] == "reverted" for p in rec["patches"])
    # the preflight warned of the absolute d2t before the launch, and stored it
    assert healthy["preflight"] == []
    assert [(f["code"], f["severity"]) for f in absolute["preflight"]] == [("d2t-absolute", "warning")]
    assert "preflight WARNING: the draft's d2t holds target ids" in done.stdout
    assert snapshot(workdir / "rehearsal" / "vllm") == shipped_vllm(tmp_path)


def test_vllm_experiment_end_to_end_on_the_local_rehearsal_host(vllm_project, tmp_path):
    check_vllm_runs(vllm_project, "local", vllm_project / "host", tmp_path)


@pytest.mark.slow  # ~16 s alone on 2 idle cores; the local case above is the one end-to-end run by default
@pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")
def test_vllm_experiment_end_to_end_over_ssh(vllm_project, sshd_box, no_user_ssh, tmp_path):
    known = vllm_project / "known_hosts"
    known.write_text(sshd_box.known_line())
    workdir = vllm_project / "box-work"
    (vllm_project / "inventory.yaml").write_text("hosts:\n" + sshd_box.rehearsal_entry(known, workdir))
    check_vllm_runs(vllm_project, "box", workdir, tmp_path)
    assert not list((workdir / "journal").rglob("*.json"))


def test_diff_of_an_sglang_run_and_a_vllm_run_of_the_same_draft(vllm_project):
    sglang = orch(vllm_project, "run", "experiments/eagle_debug.yaml", "--variant", "fixed",
                  "--set", f"port={free_port()}")
    assert sglang.returncode == 0, sglang.stdout + sglang.stderr
    vllm = orch(vllm_project, "run", "experiments/vllm_eagle.yaml", "--variant", "eagle3",
                "--set", f"port={free_port()}")
    assert vllm.returncode == 0, vllm.stdout + vllm.stderr
    runs = json.loads(orch(vllm_project, "ls", "--json").stdout)
    assert [(r["experiment"], r["variant"]) for r in runs] == [("eagle_debug", "fixed"), ("vllm_eagle", "eagle3")]
    assert record(vllm_project, "last~1")["params"]["draft_model_path"] == \
        record(vllm_project, "last")["params"]["draft_model_path"]
    diff = json.loads(orch(vllm_project, "diff", "--json").stdout)
    accept = diff["metrics"]["accept_len"]
    assert 2.5 < accept["a"] < 3.5 and 2.5 < accept["b"] < 3.5, accept
    # each engine's own names for the same draft settings: SGLang's steps + 1 draft tokens, vLLM's 3
    assert diff["params"]["speculative_algorithm"] == {"a": "EAGLE3", "b": None}
    assert diff["params"]["speculative_method"] == {"a": None, "b": "eagle3"}
    assert (diff["params"]["speculative_num_steps"]["a"], diff["params"]["num_speculative_tokens"]["b"]) == (3, 3)
    text = orch(vllm_project, "diff").stdout
    assert "eagle_debug/fixed" in text and "vllm_eagle/eagle3" in text
    [row] = [line for line in text.splitlines() if "accept_len" in line]
    assert f"{accept['a']:.3f}" in row and f"{accept['b']:.3f}" in row


def test_import_of_a_vllm_log_through_the_cli(tmp_path):
    done = orch(tmp_path, "import", str(FIXTURES / "spec_0.10.1.1.log"), "--name", "by-hand", "--host", "gpu-7")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vllm serve /ckpt/llama-target --speculative-config" in done.stdout
    rec = record(tmp_path, "last")
    assert (rec["experiment"], rec["variant"], rec["host"], rec["status"]) == ("imported", "by-hand", "gpu-7", "succeeded")
    assert rec["params"] == {"model_path": "/ckpt/llama-target", "speculative_method": "eagle3",
                             "draft_model_path": "/ckpt/eagle3-draft", "num_speculative_tokens": 3}
    assert accept_lengths(rec) == {"spec_decode_log": pytest.approx(1 + 1234 / (1782 / 3 + 300 / 3))}  # by drafts
    assert [p["mean_accept_len"] for p in rec["series"] if p["kind"] == "spec_decode"] == [3.08, 1.0]
