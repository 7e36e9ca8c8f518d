"""The preflight reads the rendered launch command, parsed with the engine's own flag table, never
the experiment's param names: `--speculative-algorithm EAGLE` written literally in a template (or
through an `{% if %}`, or an env variable the script exports) is the story's bug on every rehearsal
release, in `orch check` and before a run; the same for vLLM's `--speculative-config` JSON. A local
model or draft path missing on the host is an ERROR before anything on the host changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from orchestrator.engines import command
from orchestrator.engines.sglang import flags as sglang_flags
from orchestrator.engines.vllm import flags as vllm_flags
from support.cli import orch
from support.files import snapshot

RELEASES = ("0.4.10", "0.5.9", "0.5.23")
SIM = ROOT / "orchestrator" / "rehearsal" / "trees" / "sglang"
CKPT = "{{ host.rehearsal }}/checkpoints"

# A template with no `speculative_algorithm` param: the algorithm is a literal, as a new user writes it.
LITERAL_TEMPLATE = """#!/usr/bin/env bash
set -euo pipefail
export PYTHONPATH={{ host.rehearsal | qpath }}${PYTHONPATH:+:$PYTHONPATH}
export ORCH_REHEARSAL_GPUS=8
export ALGORITHM=EAGLE
exec {{ host.python | qpath }} -m sglang.launch_server \\
  --model {{ model_path | q }} \\
  --tp-size 1 \\
  --disable-cuda-graph \\
  --trust-remote-code \\
{% if literal %}
  --speculative-algorithm EAGLE \\
{% else %}
  --speculative-algorithm "$ALGORITHM" \\
{% endif %}
  --speculative-draft-model-path={{ draft_model_path | q }} \\
  --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \\
  --port {{ port | q }}
"""

EXPERIMENT = f"""name: literal
hosts: [local]
template: ../templates/literal.sh.j2
params:
  model_path: "{CKPT}/llama-target"
  draft_model_path: "{CKPT}/eagle3-draft"
  literal: true
  port: @PORT@
env:
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
variants:
  base: {{}}
workload: {{requests: 2, max_new_tokens: 8, concurrency: 1}}
ready_timeout: 60
"""


def literal_project(project: Path, release: str) -> Path:
    (project / "templates" / "literal.sh.j2").write_text(LITERAL_TEMPLATE)
    spec = project / "experiments" / "literal.yaml"
    spec.write_text(EXPERIMENT.replace("@PORT@", str(free_port())))
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    return spec


def check_json(project: Path, spec: Path, *args: str) -> tuple[int, dict[str, dict]]:
    done = orch(project, "check", str(spec), "--json", *args)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    return done.returncode, {f["code"]: f for g in json.loads(done.stdout) for f in g["findings"]}


# -- the parse: the engine's own flag table ----------------------------------------------------


def table_of(release: str) -> sglang_flags.FlagSet:
    source = (SIM / "releases" / release / "sglang" / "srt" / "server_args.py").read_text()
    return sglang_flags.scan({"srt/server_args.py": source}, release)


@pytest.mark.parametrize("release", RELEASES)
def test_aliases_equals_forms_prefixes_and_switches_reach_their_destination(release):
    script = ("exec python -m sglang.launch_server --model /m --trust-remote-code --speculative-algorithm=EAGLE \\\n"
              "  --speculative-draft-model-path /d --disable-radix-cache --speculative-num-st 3 --port 1\n")
    found = sglang_flags.command_of(script, table_of(release))
    assert found.values() == {"model_path": "/m", "trust_remote_code": True, "speculative_algorithm": "EAGLE",
                              "speculative_draft_model_path": "/d", "disable_radix_cache": True,
                              "speculative_num_steps": "3", "port": "1"}
    assert found.args["speculative_draft_model_path"].line == 2  # where the script writes it


def test_a_boolean_optional_flag_and_its_no_form():
    source = ('parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction, default=True)\n'
              'parser.add_argument("--model-path", "--model", type=str)\n'
              'parser.add_argument("--cuda-graph-bs", type=int, nargs="+")\n')
    found = sglang_flags.scan({"srt/server_args.py": source}, "t")
    words = "exec python -m sglang.launch_server --no-enable-x --cuda-graph-bs 1 2 4 --model m\n"
    assert sglang_flags.command_of(words, found).values() == {"enable_x": False, "cuda_graph_bs": ["1", "2", "4"],
                                                              "model_path": "m"}


def test_without_a_flag_table_the_command_itself_is_read():
    found = sglang_flags.command_of("exec python -m sglang.launch_server --model-path /m --trust-remote-code "
                                    "--speculative-algorithm EAGLE --no-foo\n", None)
    assert found.values() == {"model_path": "/m", "trust_remote_code": True, "speculative_algorithm": "EAGLE",
                              "foo": False}


def test_vllm_reads_the_positional_model_underscores_and_the_last_speculative_config():
    first, last = json.dumps({"method": "eagle3"}), json.dumps({"method": "eagle", "model": "/d"})
    script = f"exec vllm serve /m --max_model_len 4096 --speculative-config '{first}' --speculative-config='{last}' --no-enable-prefix-caching\n"
    found = vllm_flags.command_of(script)
    assert found.values() == {"max_model_len": "4096", "speculative_config": last, "enable_prefix_caching": False,
                              "model": "/m"}


def test_values_are_compared_as_the_engine_parsed_them():
    assert command.same("8", 8) and command.same("0.85", 0.85) and command.same("eagle3", "EAGLE3")
    assert command.same(True, True) and not command.same("8", 4) and not command.same("NEXTN", "EAGLE")


# -- orch check and orch run, on every emulated release -----------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_check_finds_the_literal_eagle_in_the_template(project, release):
    spec = literal_project(project, release)
    code, found = check_json(project, spec)
    assert code == 2, found
    assert found["algorithm-not-eagle3"]["severity"] == "error" and "EAGLE3" in found["algorithm-not-eagle3"]["fix"]


def test_check_finds_it_through_an_env_variable_the_script_exports(project):
    spec = literal_project(project, "0.5.9")
    code, found = check_json(project, spec, "--set", "literal=false")
    assert code == 2 and found["algorithm-not-eagle3"]["severity"] == "error"


@pytest.mark.parametrize("release", RELEASES)
def test_run_stops_at_the_preflight_with_nothing_on_the_host_changed(project, release):
    spec = literal_project(project, release)
    orch(project, "check", str(spec))  # installs the rehearsal tree: the run below must change nothing of it
    before = snapshot(project / "host" / "rehearsal" / "sglang")
    done = orch(project, "run", str(spec))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "algorithm-not-eagle3" in done.stdout + done.stderr or "only for EAGLE3" in done.stdout + done.stderr
    assert snapshot(project / "host" / "rehearsal" / "sglang") == before
    assert not list((project / "host" / "runs").rglob("server.log"))  # no server was launched


def test_a_missing_absolute_draft_is_an_error_before_any_launch(project):
    spec = literal_project(project, "0.5.9")
    orch(project, "check", str(spec))
    before = snapshot(project / "host" / "rehearsal" / "sglang")
    code, found = check_json(project, spec, "--set", "draft_model_path=/nonexistent/eagle3-draft")
    assert code == 2
    missing = found["checkpoint-path-missing"]
    assert missing["severity"] == "error" and "/nonexistent/eagle3-draft" in missing["what"]
    done = orch(project, "run", str(spec), "--set", "draft_model_path=/nonexistent/eagle3-draft")
    assert done.returncode == 2 and "/nonexistent/eagle3-draft" in done.stdout + done.stderr
    assert snapshot(project / "host" / "rehearsal" / "sglang") == before
    assert not list((project / "host" / "runs").rglob("server.log"))


def test_a_hub_id_is_not_a_path(project):
    spec = literal_project(project, "0.5.9")
    code, found = check_json(project, spec, "--set", "draft_model_path=org/eagle3-draft")
    assert "checkpoint-path-missing" not in found


# -- vLLM: the --speculative-config JSON as written ---------------------------------------------

VLLM_LITERAL = """#!/usr/bin/env bash
set -euo pipefail
export PYTHONPATH={{ host.rehearsal | qpath }}${PYTHONPATH:+:$PYTHONPATH}
export ORCH_REHEARSAL_GPUS=8
exec {{ host.python | qpath }} -m vllm.entrypoints.cli.main serve {{ model_path | q }} \\
  --tensor-parallel-size 1 \\
  --speculative-config '{"method": "eagle", "model": "{{ draft_model_path }}", "num_speculative_tokens": 3}' \\
  --port {{ port | q }}
"""


@pytest.fixture(params=["0.10.1.1", "0.33.0"])
def vllm_literal(project: Path, request) -> Path:
    """The literal vLLM template on each release of the vLLM stand-in."""
    (project / "templates" / "literal.sh.j2").write_text(VLLM_LITERAL)
    spec = project / "experiments" / "literal.yaml"
    spec.write_text(EXPERIMENT.replace("@PORT@", str(free_port())).replace("  literal: true\n", "")
                    .replace("hosts: [local]", "engine: vllm\nhosts: [local]"))
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{request.param}"'))
    return spec


def test_vllm_check_reads_the_literal_speculative_config(project, vllm_literal):
    code, found = check_json(project, vllm_literal)
    assert code == 2 and found["method-eagle-with-eagle3-draft"]["severity"] == "error"


def test_vllm_missing_draft_is_an_error(project, vllm_literal):
    code, found = check_json(project, vllm_literal, "--set", "draft_model_path=/nonexistent/d")
    assert code == 2 and "/nonexistent/d" in found["checkpoint-path-missing"]["what"]


def test_vllm_run_stops_at_the_literal_method_with_nothing_on_the_host_changed(project, vllm_literal):
    orch(project, "check", str(vllm_literal))  # installs the stand-in: the run below must change nothing of it
    before = snapshot(project / "host" / "rehearsal" / "vllm")
    done = orch(project, "run", str(vllm_literal))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "preflight ERROR: method eagle with the EAGLE-3 draft" in done.stdout, done.stdout
    assert snapshot(project / "host" / "rehearsal" / "vllm") == before
    assert not list((project / "host" / "runs").rglob("server.log"))  # no server was launched
