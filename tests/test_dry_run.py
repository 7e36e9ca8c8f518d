"""`orch run --dry-run` checks what a run checks before it changes anything (the flags the host's
SGLang accepts, the preflight, every patch) and exits as the run would; the host is left byte for
byte as it was, every time."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_check import broken_drafts, with_checkpoint
from test_run import orch, snapshot

CKPT = "{{ host.rehearsal }}/checkpoints"
BROKEN_DRAFT = ("--set", f"draft_model_path={CKPT}/eagle3-draft-layers0")
EXPERIMENT = f"""\
name: dry
hosts: [local]
template: ../templates/sglang_launch.sh.j2
params:
  model_path: "{CKPT}/llama-target"
  draft_model_path: "{CKPT}/eagle3-draft"
  tp_size: 1
  mem_fraction_static: 0.85
  num_continuous_decode_steps: 1
  disable_cuda_graph: false
  speculative_algorithm: EAGLE3
  speculative_num_steps: 3
  speculative_eagle_topk: 1
  speculative_num_draft_tokens: 4
  port: 30000
env:
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
patches:
  debug-hidden-states:
    file: sglang:srt/models/llama_eagle3.py
    find: "hidden_states = forward_batch.spec_info.hidden_states"
    insert_after: |
      print("[EAGLE3-DEBUG]", hidden_states.shape, flush=True)
variants:
  v:
    patches: [debug-hidden-states]
"""


@pytest.fixture
def demo(project: Path) -> Path:
    """An EAGLE-3 experiment on a rehearsal host that already holds the rehearsal SGLang."""
    spec = project / "experiments" / "dry.yaml"
    spec.write_text(EXPERIMENT)
    installed = orch(project, "check", str(spec))
    assert installed.returncode in (0, 2), installed.stdout + installed.stderr
    return spec


def dry_run(project: Path, spec: Path, *args: str):
    """The dry run's result, and whether the host (workdir, rehearsal SGLang) was left unchanged."""
    before = snapshot(project / "host")
    done = orch(project, "run", str(spec), "--dry-run", "--set", "port=1", *args)
    return done, snapshot(project / "host") == before


def test_a_healthy_dry_run_shows_script_and_patches_and_changes_nothing(project, demo):
    done, unchanged = dry_run(project, demo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launch script:" in done.stdout and "patch 'debug-hidden-states'" in done.stdout
    assert unchanged and done.stderr == ""
    assert not (project / "host" / "lock").exists() and not (project / "host" / "runs").exists()


def test_a_dry_run_stops_at_a_flag_the_host_rejects(project, demo):
    demo.write_text(demo.read_text().replace("  port: 30000\n", "  port: 30000\n  extra_args: [--speculative-num-stpes, '3']\n"))
    done, unchanged = dry_run(project, demo)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "has no flag --speculative-num-stpes" in line and "closest: --speculative-num-steps" in line
    assert "patch 'debug-hidden-states'" not in done.stdout  # stopped before the patches, as a run does
    assert unchanged


def test_a_dry_run_stops_at_a_preflight_error_unless_told_to_skip_it(project, demo):
    done, unchanged = dry_run(project, demo, *BROKEN_DRAFT)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: preflight:") and "--no-preflight" in line
    assert "preflight ERROR:" in done.stdout and "layers.0" in done.stdout  # the finding itself is shown
    assert unchanged
    skipped, unchanged = dry_run(project, demo, *BROKEN_DRAFT, "--no-preflight")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "preflight skipped" in skipped.stdout and unchanged
    assert orch(project, "ls", "--json").stdout.strip() in ("", "[]")  # a dry run records nothing


def test_a_dry_run_reads_checkpoints_from_their_local_copies(project, demo, tmp_path):
    with_checkpoint(demo, broken_drafts(tmp_path / "drafts")["fc2"])
    done, unchanged = dry_run(project, demo)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: preflight:" in done.stderr and "128 inputs" in done.stderr
    assert unchanged and not (project / "host" / "ckpt").exists()  # nothing pushed


def test_a_dry_run_passes_an_error_the_experiment_allows(project, demo):
    story = ("--set", "speculative_algorithm=EAGLE")  # an EAGLE-3 draft without capture: the story's command
    done, unchanged = dry_run(project, demo, *story)
    assert done.returncode == 2 and "algorithm" in done.stderr and unchanged, done.stdout + done.stderr
    demo.write_text(demo.read_text().replace("    patches: [debug-hidden-states]\n",
                                             "    patches: [debug-hidden-states]\n    preflight: {allow: [algorithm-not-eagle3]}\n"))
    allowed, unchanged = dry_run(project, demo, *story)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "preflight ERROR (allowed):" in allowed.stdout and unchanged
