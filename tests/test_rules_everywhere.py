"""The experiment's own errors and the checkpoint-path rule on every emulated release: SGLang
0.4.10, 0.5.9 and 0.5.23, the vLLM stand-in's 0.10.1.1 and 0.33.0. A bad patch anchor in a 4-plan
sweep exits 2 with one line and no run recorded; a `params:` typo exits 2 with a did-you-mean
before any host; a draft path missing on the host exits 2 with no server launched. Nothing on the
host changes in any of them. (The real vLLM CPU engine's cases: tests/test_real_vllm_flags.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from support.cli import orch
from support.files import snapshot
from support.specs import debug_patch, rehearsal_experiment

RELEASES = [("sglang", "0.4.10"), ("sglang", "0.5.9"), ("sglang", "0.5.23"), ("vllm", "0.10.1.1"), ("vllm", "0.33.0")]
CHANGED = {"sglang": {"disable_cuda_graph": True}, "vllm": {}}  # from the rehearsal experiment's params
LOADER = {"sglang": "sglang:srt/models/llama_eagle3.py", "vllm": "vllm:model_executor/models/llama_eagle3.py"}
VARIANTS = "variants:\n  plain: {}\n  patched: {patches: [debug-print]}\nready_timeout: 60\n"
SWEEP = "matrix:\n  num_speculative_tokens: [1, 2, 3, 4]\n"  # 4 plans of a variant (vLLM's param)
SGLANG_SWEEP = "matrix:\n  speculative_num_steps: [1, 2, 3, 4]\n"


@pytest.fixture(params=RELEASES, ids=lambda r: f"{r[0]}-{r[1]}")
def experiment(request, project: Path) -> tuple[str, Path]:
    engine, release = request.param
    (project / "templates" / f"{engine}_launch.sh.j2").write_text((ROOT / "templates" / f"{engine}_launch.sh.j2").read_text())
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    spec = project / "experiments" / "everywhere.yaml"
    patch = debug_patch("debug-print", 'print("[DEBUG] here", flush=True)', file=LOADER[engine],
                        find="this text is in no file")
    spec.write_text(rehearsal_experiment("everywhere", engine=engine, params={**CHANGED[engine], "port": free_port()},
                                         workload={"requests": 2, "max_new_tokens": 8, "concurrency": 1},
                                         extra=patch + VARIANTS))
    return engine, spec


def installed(project: Path, spec: Path) -> dict[str, str]:
    """The host as orch leaves it once the rehearsal is installed (a check only reads after that)."""
    orch(project, "check", str(spec), "--variant", "plain")
    return snapshot(project / "host")


def runs(project: Path) -> list[dict]:
    return json.loads(orch(project, "ls", "--json").stdout)


def errors(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error")]


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_a_bad_anchor_in_a_4_plan_sweep_is_one_line_and_no_run(project, experiment, dry):
    engine, spec = experiment
    spec.write_text(spec.read_text() + (SGLANG_SWEEP if engine == "sglang" else SWEEP))
    before = installed(project, spec)
    done = orch(project, "run", str(spec), "--variant", "patched", *(["--dry-run"] if dry else []))
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = set(errors(done))
    assert not dry or errors(done) == [line]  # a dry run prints it once too
    assert "debug-print" in line and "0 times" in line and "llama_eagle3.py" in line, line
    assert runs(project) == []  # no failed run per plan
    assert snapshot(project / "host") == before


def test_a_params_typo_is_refused_with_a_did_you_mean(project, experiment):
    engine, spec = experiment
    right = "speculative_method" if engine == "vllm" else "speculative_algorithm"
    spec.write_text(spec.read_text().replace(f"  {right}:", f"  {right[:-2]}:"))  # the last two letters lost
    done = orch(project, "run", str(spec), "--variant", "plain")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert f"param '{right[:-2]}' is read by nothing" in line and f"did you mean '{right}'?" in line, line
    assert "everywhere.yaml:" in line
    assert runs(project) == [] and not (project / "host").exists()  # no host was touched


def test_a_missing_draft_path_stops_before_any_server(project, experiment):
    _, spec = experiment
    before = installed(project, spec)
    done = orch(project, "run", str(spec), "--variant", "plain", "--set", "draft_model_path=/nonexistent/eagle3-draft")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "checkpoint-path-missing" in said or "/nonexistent/eagle3-draft" in said, said
    assert not list((project / "host" / "runs").rglob("server.log"))  # no server was launched
    assert {k: v for k, v in snapshot(project / "host").items() if not k.startswith("runs/")} == before
