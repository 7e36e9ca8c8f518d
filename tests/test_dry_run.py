"""`orch run --dry-run` checks what a run checks before it changes anything (the flags the host's
SGLang accepts, the preflight, every patch) and exits as the run would; the host is left byte for
byte as it was, every time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from test_check import broken_drafts, with_checkpoint
from test_run import orch, snapshot

CKPT = "{{ host.rehearsal }}/checkpoints"
BROKEN_DRAFT = ("--set", f"model_path={CKPT}/llama-target", "--set", f"draft_model_path={CKPT}/eagle3-draft-layers0")


@pytest.fixture
def demo(project: Path) -> Path:
    """The demo experiment on a rehearsal host that already holds the rehearsal SGLang."""
    spec = project / "experiments" / "eagle_debug.yaml"
    shutil.copy(ROOT / "experiments" / "eagle_debug.yaml", spec)
    installed = orch(project, "check", str(spec), "--variant", "baseline")
    assert installed.returncode in (0, 2), installed.stdout + installed.stderr
    return spec


def dry_run(project: Path, spec: Path, *args: str):
    """The dry run's result, and whether the host (workdir, rehearsal SGLang) was left unchanged."""
    before = snapshot(project / "host")
    done = orch(project, "run", str(spec), "--dry-run", "--variant", "baseline", "--set", "port=1", *args)
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
    done, unchanged = dry_run(project, demo, "--set", f"model_path={CKPT}/llama-target")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: preflight:" in done.stderr and "128 inputs" in done.stderr
    assert unchanged and not (project / "host" / "ckpt").exists()  # nothing pushed
