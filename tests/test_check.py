"""`orch check` and the preflight of `orch run` end to end: the real command, the rehearsal SGLang on
the local host, generated and rehearsal checkpoints. Each failure mode is reported before launch;
with `--no-preflight` the run shows its consequence (accept length ~1.0)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from support.cli import orch
from support.drafts import broken_drafts, with_checkpoint
from support.files import snapshot

CKPT = "{{ host.rehearsal }}/checkpoints"
LLAMA = ("--set", f"model_path={CKPT}/llama-target")
STORY, FIXED = "story", "fixed"  # the demo's variants: the story's command (EAGLE), and EAGLE3 with the capture patched in


@pytest.fixture
def demo(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))  # transforms and manifests stay in the test
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", project / "experiments" / "eagle_debug.yaml")
    return project / "experiments" / "eagle_debug.yaml"


def check_json(project: Path, spec: Path, *args: str) -> tuple[int, dict[str, dict[str, dict]]]:
    """exit code, {variant: {code: finding}}"""
    done = orch(project, "check", str(spec), "--json", *args)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    groups = json.loads(done.stdout)
    return done.returncode, {g["variant"]: {f["code"]: f for f in g["findings"]} for g in groups}


def test_the_demo_passes_with_the_storys_error_allowed_and_the_fix_as_info(project, demo):
    code, found = check_json(project, demo)
    assert code == 0  # the story's error is acknowledged by its variant: reported, not stopping
    story = found[STORY]["algorithm-not-eagle3"]
    assert story["severity"] == "error" and story["allowed"] is True and "EAGLE3" in story["fix"]
    assert found[FIXED]["aux-capture-patched"]["severity"] == "info"  # its patch adds the method
    assert not any(f["severity"] == "error" for f in found[FIXED].values())
    text = orch(project, "check", str(demo)).stdout
    assert "error" in text and "why:" in text and "fix:" in text
    demo.write_text(demo.read_text().replace("    preflight: {allow: [algorithm-not-eagle3]}\n", ""))
    code, found = check_json(project, demo, "--variant", STORY)
    assert code == 2 and found[STORY]["algorithm-not-eagle3"]["allowed"] is False  # not acknowledged: it stops


@pytest.mark.parametrize("args, code, severity, fix", [
    (("--set", f"draft_model_path={CKPT}/eagle3-draft-layers0"), "draft-keys-dropped", "error", "rename_keys"),
    (("--set", f"draft_model_path={CKPT}/eagle3-draft-absolute-d2t"), "d2t-absolute", "error", "d2t_to_offsets"),
    (("--set", "env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=0"), "draft-context", "error",
     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"),
    (("--set", "speculative_num_draft_tokens=6"), "draft-tokens-adjusted", "warning", "speculative_num_draft_tokens: 4"),
])
def test_check_reports_each_rehearsal_failure_mode(project, demo, args, code, severity, fix):
    exit_code, found = check_json(project, demo, "--variant", FIXED, *args)
    assert exit_code == (2 if severity == "error" else 0)
    finding = found[FIXED][code]
    assert finding["severity"] == severity and fix in finding["fix"] and finding["what"] and finding["why"]


@pytest.mark.parametrize("broken, code, words", [
    ("fc2", "fc-width", "128 inputs"), ("nohead", "lm-head-missing", "lm_head.weight"),
])
def test_check_reads_generated_drafts_before_they_are_pushed(project, demo, tmp_path, broken, code, words):
    with_checkpoint(demo, broken_drafts(tmp_path / "drafts")[broken])
    exit_code, found = check_json(project, demo, "--variant", FIXED, *LLAMA)
    assert exit_code == 2
    assert found[FIXED][code]["severity"] == "error" and words in found[FIXED][code]["what"]
    assert not (project / "host" / "ckpt").exists()  # read from the local copy; nothing pushed


def test_run_stops_before_any_patch_or_launch_and_keeps_the_findings(project, demo):
    orch(project, "check", str(demo), "--variant", FIXED)  # installs the rehearsal
    before = snapshot(project / "host")
    done = orch(project, "run", str(demo), "--variant", FIXED, *LLAMA,
                "--set", f"draft_model_path={CKPT}/eagle3-draft-layers0", "--set", f"port={free_port()}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "preflight" in done.stdout + done.stderr and "--no-preflight" in done.stdout + done.stderr
    after = snapshot(project / "host")
    assert {k: v for k, v in after.items() if not k.startswith(("lock", "journal"))} == before
    assert not (project / "host" / "runs").exists() or not any((project / "host" / "runs").iterdir())
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["status"] == "failed" and record["patches"] == []
    assert {f["code"]: f["severity"] for f in record["preflight"]}["draft-keys-dropped"] == "error"
    assert "preflight" in orch(project, "show", "last").stdout


@pytest.mark.parametrize("draft", ["eagle3-draft-layers0", "eagle3-draft-absolute-d2t"])
def test_no_preflight_runs_anyway_and_shows_the_consequence(project, demo, draft):
    done = orch(project, "run", str(demo), "--variant", FIXED, "--no-preflight", *LLAMA,
                "--set", f"draft_model_path={CKPT}/{draft}", "--set", f"port={free_port()}")
    assert done.returncode == 1, done.stdout + done.stderr  # it ran, and missed the variant's expectation
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["metrics"]["accept_len"] < 1.2 and "draft-rejected" in record["flags"]
    assert record["status"] == "failed" and record["error"].startswith("expectation failed: accept_len")
    assert "preflight-skipped" in [e["kind"] for e in record["events"]] and record["preflight"] == []


def test_a_transformed_checkpoint_is_pushed_recorded_and_fixes_the_draft(project, demo, tmp_path):
    subprocess.run([sys.executable, str(ROOT / "orchestrator/rehearsal/trees/sglang/make_checkpoints.py"), str(tmp_path / "made")], check=True)
    with_checkpoint(demo, tmp_path / "made" / "eagle3-draft-layers0", '[{rename_keys: {"layers.0.": "midlayer."}}]')
    for attempt in range(2):
        done = orch(project, "run", str(demo), "--variant", FIXED, *LLAMA, "--set", f"port={free_port()}")
        assert done.returncode == 0, done.stdout + done.stderr
        record = json.loads(orch(project, "show", "last", "--json").stdout)
        [pushed] = record["checkpoints"]
        assert pushed["transforms"] == [{"rename_keys": {"layers.0.": "midlayer."}}]
        assert pushed["source_hash"] != pushed["result_hash"] == pushed["manifest_hash"]
        assert pushed["sent_files"] == (2 if attempt == 0 else 0)  # the second run moves nothing
        assert record["metrics"]["accept_len"] > 2.0
        assert record["params"]["draft_model_path"] == str(project / "host" / "ckpt" / "draft")
    assert (tmp_path / "made" / "eagle3-draft-layers0" / "model.safetensors").read_bytes() != \
        (project / "host" / "ckpt" / "draft" / "model.safetensors").read_bytes()  # the source is never changed


def test_a_bad_checkpoint_entry_is_a_one_line_error_naming_the_file(project, demo):
    demo.write_text(demo.read_text() + "\ncheckpoints:\n  - name: draft\n    src: no/such/folder\n    dest: /x\n")
    done = orch(project, "run", str(demo))
    assert done.returncode == 2 and "eagle_debug.yaml:" in done.stderr and "is not a folder" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (project / "host").exists()
    demo.write_text(demo.read_text().replace("dest: /x\n", "dest: /x\n    transform: [shrink]\n").replace("no/such/folder", "."))
    done = orch(project, "check", str(demo))
    assert done.returncode == 2 and "unknown transform 'shrink'" in done.stderr and not (project / "host").exists()


def test_a_sweeps_finding_is_said_once_with_the_points_it_covers(project, demo):
    """steps x topk x repeats over both variants: 24 runs to check, 12 points. The story's
    algorithm error comes from each of its 6 points (12 runs) and is printed once, its points said
    as the sweep's product; a finding of every run reads `all 12 points`. The JSON keeps a group
    per run, each with its matrix point and repeat."""
    demo.write_text(demo.read_text().replace(
        "\nvariants:", "\nmatrix:\n  speculative_num_steps: [3, 4, 5]\n  speculative_eagle_topk: [1, 4]\nrepeats: 2\n"
        "\nvariants:", 1))
    done = orch(project, "check", str(demo))
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert text.startswith("checked 12 points on local: ")
    algorithm = next(line for line in text.splitlines() if "--speculative-algorithm EAGLE with" in line)
    assert text.count(algorithm) == 1 and "(allowed by the experiment)" in algorithm
    after = text.splitlines()[text.splitlines().index(algorithm) + 3]
    assert after.strip() == "in: variant=story x steps=3..5 x topk=1,4 (6 points)"
    assert "in: all 12 points" in text  # the target class's missing hook: every run's
    assert "in: variant=story,fixed x steps=4 x topk=1 (2 points)" in text  # draft tokens adjusted: one point's
    done = orch(project, "check", str(demo), "--json")
    groups = json.loads(done.stdout)
    assert len(groups) == 24 and sorted({g["repeat"] for g in groups}) == [0, 1]
    assert {(g["variant"], g["point"]["speculative_num_steps"], g["point"]["speculative_eagle_topk"]) for g in groups} \
        == {(v, s, k) for v in (STORY, FIXED) for s in (3, 4, 5) for k in (1, 4)}
    story = [g for g in groups if g["variant"] == STORY]
    assert all(sum(f["code"] == "algorithm-not-eagle3" for f in g["findings"]) == 1 for g in story)
    from orchestrator.api.findings import grouped  # what the printout reads, for a caller of the library

    [once] = [f.as_json() for f in grouped(groups) if f.code == "algorithm-not-eagle3"]
    assert once["hosts"] == ["local"] and once["allowed"] is True
    assert once["points"][:2] == [{"variant": STORY, "speculative_num_steps": 3, "speculative_eagle_topk": 1},
                                  {"variant": STORY, "speculative_num_steps": 3, "speculative_eagle_topk": 4}]
    assert len(once["points"]) == 6  # each point once, its two repeats together


def test_points_that_are_no_product_are_listed_and_variants_alone_by_name():
    from orchestrator.api.findings import Point
    from orchestrator.cli.checked import points_text

    every = [Point("v", {"speculative_num_steps": s, "speculative_eagle_topk": k}) for s in (1, 3, 5) for k in (1, 4)]
    assert points_text(every[:2], every) == "steps=1 x topk=1,4 (2 points)"  # 1, 3, 5: not a run of whole numbers
    assert points_text([every[0], every[3]], every) == "steps=1 topk=1; steps=3 topk=4 (2 points)"
    assert points_text(every * 1, every) == "all 6 points"
    many = [Point("v", {"n": n}) for n in range(10)]
    assert points_text(many[2:5], many) == "n=2..4 (3 points)"
    assert points_text([many[8], many[0], many[4]], many) == "n=0,4,8 (3 points)"  # in the sweep's order
    named = [Point("story", {}), Point("fixed", {})]
    assert points_text(named[1:], named) == "fixed" and points_text(named, named) == "story, fixed"
