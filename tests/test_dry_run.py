"""`orch run --dry-run` checks what a run checks before it changes anything (the flags the host's
SGLang accepts, the preflight, every patch) and exits as the run would; the host is left byte for
byte as it was, every time."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import orch
from support.drafts import broken_drafts, with_checkpoint
from support.files import snapshot
from support.specs import debug_patch, rehearsal_experiment

CKPT = "{{ host.rehearsal }}/checkpoints"
BROKEN_DRAFT = ("--set", f"draft_model_path={CKPT}/eagle3-draft-layers0")
PATCHED_VARIANT = (debug_patch("debug-hidden-states", 'print("[EAGLE3-DEBUG]", hidden_states.shape, flush=True)')
                   + "variants:\n  v:\n    patches: [debug-hidden-states]\n")
EXPERIMENT = rehearsal_experiment("dry", extra=PATCHED_VARIANT)


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


def two_local_hosts(project: Path, spec: Path, nodes: int = 2) -> list[Path]:
    """Hosts a and b, both this machine with a workdir each; the experiment's plans over both
    (tp_size 2: one GPU on each). Returns the workdirs in inventory order."""
    workdirs = [project / f"{name}-host" for name in ("a", "b")]
    (project / "inventory.yaml").write_text("hosts:\n" + "".join(
        f"  {w.name[0]}:\n    transport: local\n    workdir: {w}\n    gpus: 1\n    rehearsal: true\n" for w in workdirs))
    spec.write_text(spec.read_text().replace("hosts: [local]", f"hosts: [a, b]\nnodes: {nodes}")
                    .replace("  tp_size: 1\n", "  tp_size: 2\n"))
    return workdirs


def test_a_dry_run_over_two_hosts_renders_and_checks_every_nodes_script_and_changes_nothing(project):
    spec = project / "experiments" / "dry.yaml"
    spec.write_text(EXPERIMENT)
    workdirs = two_local_hosts(project, spec)
    done = orch(project, "run", str(spec), "--dry-run")  # THE real case (~6 s): each host's lifecycle installs its rehearsal
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "node 0 a, node 1 b; rendezvous at 127.0.0.1:295" in out and "(free now; a dry run takes nothing)" in out
    port = out.split("rendezvous at 127.0.0.1:")[1].split()[0]
    first, second = out.index("node 0 of 2's launch script"), out.index("node 1 of 2's launch script")
    assert first < second
    for rank, part in enumerate((out[first:second], out[second:])):
        words = [w for w in part.split() if w.strip("\\")]  # the script as shown, without its line continuations
        at = words.index("--nnodes")
        assert words[at:at + 6] == ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{port}"]
    assert out[second:].count("patch 'debug-hidden-states'") == 1  # each node's patch, against its own files
    for workdir in workdirs:  # the rehearsal installed (the host's lifecycle), nothing of the dry run's: no lock, run, journal
        assert sorted(p.name for p in workdir.iterdir()) == ["rehearsal"]
        assert "[EAGLE3-DEBUG]" not in (workdir / "rehearsal" / "sglang" / "srt" / "models" / "llama_eagle3.py").read_text()
    assert orch(project, "ls", "--json").stdout.strip() in ("", "[]")  # a dry run records nothing


def fake_sessions(versions: tuple[str, ...]) -> list:
    """Sessions on hosts a, b, ... over the shipped fake Connection, each host's engine at `versions[i]`."""
    from orchestrator.core.inventory import Host
    from orchestrator.host.journal import Journal
    from orchestrator.host.session import HostSession
    from orchestrator.testing import FakeConnection

    sessions = []
    for i, version in enumerate(versions):
        host = Host(name="ab"[i], address=f"10.0.0.{i + 1}", workdir="/w", gpus=1)
        conn = FakeConnection(files={"/site/sglang/version.py": f'__version__ = "{version}"\n'.encode()})
        conn.script(r"sglang", stdout=b"/site/sglang\n")  # the package lookup finds it there
        sessions.append(HostSession(host, conn, Journal(conn, "/w")))
    return sessions


def test_a_dry_run_over_hosts_with_different_engines_is_refused_before_any_script(project):
    import asyncio

    from orchestrator.core import spec as specs
    from orchestrator.run import execute
    from orchestrator.run.attempt import Lines

    spec_path = project / "experiments" / "dry.yaml"
    spec_path.write_text(rehearsal_experiment("dry", hosts=["a", "b"], params={"tp_size": 2},
                                              extra="nodes: 2\n" + PATCHED_VARIANT))
    spec = specs.load(spec_path)
    said: list[tuple[str, str]] = []
    sessions = fake_sessions(("0.5.9", "0.5.23"))
    outcome = asyncio.run(execute.dry_run_nodes(spec, specs.expand(spec)[0], sessions, Lines(lambda *m: said.append(m))))
    assert outcome.status == "failed" and outcome.exit_code == 3 and outcome.host == "a"
    assert "the nodes of one run need the same sglang: a has 0.5.9, b has 0.5.23" in (outcome.error or "")
    assert said == []  # no script shown
    for session in sessions:
        assert {c.op for c in session.conn.calls} <= {"run", "read_file", "stat"}  # read, never written


def test_a_sweeps_dry_run_prints_scripts_as_rendered_each_diff_once_and_a_summary(project):
    """Three points of a matrix with one patch: each point's script with its `\\` continuations as
    the file holds them (not doubled), the patch's diff whole once and named after, one summary line."""
    spec = project / "experiments" / "points.yaml"
    spec.write_text(rehearsal_experiment("points", params={"speculative_num_steps": None}, extra=PATCHED_VARIANT
                                         + "matrix:\n  speculative_num_steps: [2, 3, 5]\n"))
    assert orch(project, "check", str(spec)).returncode in (0, 2)  # installs the rehearsal SGLang first
    done, unchanged = dry_run(project, spec)
    assert done.returncode == 0 and unchanged, done.stdout + done.stderr
    out = done.stdout
    assert out.count("launch script:") == 3
    continued = [line for line in out.splitlines() if line.rstrip().endswith("\\")]
    assert continued and not any(line.rstrip().endswith("\\\\") for line in continued), continued[:3]
    for steps in (2, 3, 5):
        assert f"--speculative-num-steps {steps} \\" in out
    assert out.count("+++ b/") == 1, out  # the one distinct diff, whole once
    said = " ".join(out.split())  # a long first line wraps
    assert said.count("patch 'debug-hidden-states' -> ") == 3 and said.count(": the same diff as above") == 2
    assert said.endswith("dry run: 3 plan(s) on local: 3 would run, 0 would not; nothing changed on any host, "
                         "nothing recorded")
