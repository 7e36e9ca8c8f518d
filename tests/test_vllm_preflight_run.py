"""`VllmEngine.preflight` over a local host session: the run's --speculative-config, the demo
checkpoints' config.json and safetensors read on the host, and the host's vLLM source, both the real
0.10.1.1 / 0.33.0 files (tests/vllm_wheels.py) and the rehearsal stand-in, installed as the host
python's `vllm` package (found by find_spec, never imported)."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.core.inventory import Host
from orchestrator.engines.vllm import flags, preflight, preflight_run
from orchestrator.host.session import HostSession
from orchestrator.rehearsal import vllm as rehearsal
from vllm_wheels import source_tree

HEALTHY, ABSOLUTE = "eagle3-draft", "eagle3-draft-absolute-d2t"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """The demo checkpoints, made by the vLLM rehearsal host's checkpoint maker."""
    folder = tmp_path_factory.mktemp("vllm-ck")
    rehearsal.assemble(rehearsal.DEFAULT_RELEASE, folder)
    shutil.copy(rehearsal.CHECKPOINT_MAKER, folder / "make_checkpoints.py")
    subprocess.run([sys.executable, str(folder / "make_checkpoints.py"), str(folder / "ck")], check=True,
                   capture_output=True, timeout=120)
    return folder / "ck"


def python_with(tree: Path, folder: Path) -> Path:
    """A host python whose import path starts with `tree` (the folder holding `vllm/`)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={tree} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


def real(version: str, tmp_path: Path) -> Path:
    return python_with(source_tree(version), tmp_path / f"real-{version}")


def stand_in(release: str, tmp_path: Path) -> Path:
    tree = tmp_path / f"sim-{release}"
    rehearsal.assemble(release, tree)
    return python_with(tree, tmp_path / f"sim-{release}-bin")


def findings(python: Path, tmp_path: Path, params: dict, allow: tuple[str, ...] = (), overlay=None) -> list:
    async def run() -> list:
        host = Host("gpu", transport="local", workdir=str(tmp_path / "work"), python=str(python))
        session = await HostSession.open(host)
        try:
            return await engines.get("vllm").preflight(session, script_of(params), {}, (), overlay, allow)
        finally:
            await session.conn.close()
    return asyncio.run(run())


def script_of(params: dict) -> str:
    """The launch command templates/vllm_launch.sh.j2 renders from these params: the preflight reads it."""
    words = ["vllm", "serve", params["model_path"]]
    if params.get("speculative_method"):
        words += ["--speculative-config", json.dumps({"method": params["speculative_method"],
                                                      "model": params["draft_model_path"],
                                                      "num_speculative_tokens": params["num_speculative_tokens"]})]
    words += [*params.get("extra_args", []), "--port", "8000"]
    return "#!/bin/sh\nexec " + shlex.join(words) + "\n"


def params(ck: Path, draft: str = HEALTHY, target: str = "kimi-k25-target", **more) -> dict:
    return {"model_path": str(ck / target), "draft_model_path": str(ck / draft), "speculative_method": "eagle3",
            "num_speculative_tokens": 3, **more}


def codes(found: list) -> list[str]:
    return sorted(f.code for f in found)


@pytest.mark.parametrize("host", ["real", "stand-in"])
def test_healthy_kimi_run_on_0_33_0_is_silent(host, checkpoints, tmp_path):
    python = real("0.33.0", tmp_path) if host == "real" else stand_in("0.33.0", tmp_path)
    assert findings(python, tmp_path, params(checkpoints)) == []


@pytest.mark.parametrize("host", ["real", "stand-in"])
def test_absolute_d2t_warns_from_the_tensor_read_on_the_host(host, checkpoints, tmp_path):
    python = real("0.33.0", tmp_path) if host == "real" else stand_in("0.33.0", tmp_path)
    found = findings(python, tmp_path, params(checkpoints, ABSOLUTE))
    assert [(f.code, f.severity) for f in found] == [("d2t-absolute", "warning")]


@pytest.mark.parametrize("host", ["real", "stand-in"])
def test_kimi_target_and_specforge_draft_name_fail_on_0_10_1_1(host, checkpoints, tmp_path):
    python = real("0.10.1.1", tmp_path) if host == "real" else stand_in("0.10.1.1", tmp_path)
    found = findings(python, tmp_path, params(checkpoints))
    assert codes(found) == ["draft-arch-unregistered", "target-arch-unregistered"]
    assert "KimiK25ForConditionalGeneration" in found[0].what and not any(f.allowed for f in found)


def test_allowed_codes_come_back_marked(checkpoints, tmp_path):
    found = findings(stand_in("0.10.1.1", tmp_path), tmp_path, params(checkpoints),
                     allow=("target-arch-unregistered",))
    assert {f.code: f.allowed for f in found} == {"target-arch-unregistered": True, "draft-arch-unregistered": False}


def test_the_target_module_is_read_from_the_registry(checkpoints, tmp_path):
    """0.10.1.1's DeepseekV3 class lacks SupportsEagle3: only its module (named by the registry) says so."""
    target = tmp_path / "deepseek"
    shutil.copytree(checkpoints / "kimi-k25-target", target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "architectures": ["DeepseekV3ForCausalLM"]}))
    found = findings(real("0.10.1.1", tmp_path), tmp_path, params(checkpoints, "eagle3-draft", str(target)))
    unsupported = next(f for f in found if f.code == "target-eagle3-unsupported")
    assert "model_executor/models/deepseek_v2.py:" in unsupported.what  # the class's line: the module was read


def test_extra_args_speculative_config_is_the_one_checked(checkpoints, tmp_path):
    spec = json.dumps({"method": "eagle3", "model": str(checkpoints / ABSOLUTE), "num_speculative_tokens": 3})
    run = {"model_path": str(checkpoints / "kimi-k25-target"), "extra_args": ["--speculative-config", spec]}
    assert codes(findings(stand_in("0.33.0", tmp_path), tmp_path, run)) == ["d2t-absolute"]
    assert preflight_run.speculative_config(flags.command_of(script_of({**run, "extra_args": [f"--speculative-config={spec}"]})))["model"] == \
        str(checkpoints / ABSOLUTE)
    assert preflight_run.speculative_config(flags.command_of(script_of({**run, "extra_args": ["--speculative-config", "{not json"]}))) is None


def test_no_speculative_config_checks_nothing(checkpoints, tmp_path):
    run = {"model_path": str(checkpoints / "kimi-k25-target")}
    assert findings(stand_in("0.10.1.1", tmp_path), tmp_path, run) == []


def test_missing_folder_and_host_without_vllm(checkpoints, tmp_path):
    missing = findings(stand_in("0.33.0", tmp_path), tmp_path, params(checkpoints, "no-such-draft"))
    assert codes(missing) == ["checkpoint-path-missing"] and missing[0].severity == "error"  # an absolute path
    (tmp_path / "no-config").mkdir()
    unread = findings(stand_in("0.33.0", tmp_path), tmp_path, params(checkpoints, str(tmp_path / "no-config")))
    assert codes(unread) == ["not-a-folder"] and unread[0].severity == "info"  # there, but not a checkpoint
    bare = python_with(tmp_path / "empty", tmp_path / "bare")
    found = findings(bare, tmp_path, params(checkpoints))
    assert codes(found) == ["source-unread"] and found[0].severity == "info"


def test_overlay_reads_a_local_draft_not_pushed_yet(checkpoints, tmp_path):
    """`orch check` before the push: the draft's host path is read from the local folder."""
    found = findings(stand_in("0.33.0", tmp_path), tmp_path, params(checkpoints, draft="pending"),
                     overlay={str(checkpoints / "pending"): checkpoints / ABSOLUTE})
    assert codes(found) == ["d2t-absolute"]


def test_every_code_the_run_side_makes_is_registered():
    assert {"config-invalid", "not-a-folder", "source-unread", "draft-weights-unchecked"} <= set(preflight.CODES)
    assert engines.preflight_codes("vllm") == preflight.CODES
