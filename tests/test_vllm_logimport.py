"""`orch import` of a vLLM log: the non-default args line -> params, command, warnings."""

from pathlib import Path

from orchestrator.engines.vllm import logimport, logs

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


def test_params_and_command_from_a_real_log():
    report = logs.parse_log((FIXTURES / "spec_0.10.1.1.log").read_bytes())
    params, command, warnings = logimport.launch_of(report.launch_args, "spec.log")
    assert params == {"model_path": "/ckpt/llama-target", "speculative_method": "eagle3",
                      "draft_model_path": "/ckpt/eagle3-draft", "num_speculative_tokens": 3}
    assert command == ("vllm serve /ckpt/llama-target --speculative-config "
                       "'{\"method\": \"eagle3\", \"model\": \"/ckpt/eagle3-draft\", \"num_speculative_tokens\": 3}'")
    assert warnings == []


def test_unknown_arguments_are_kept_and_named():
    params, command, warnings = logimport.launch_of("{'model_tag': '/m', 'enforce_eager': True}", "a.log")
    assert params == {"model_path": "/m"} and command == "vllm serve /m --enforce-eager"
    assert warnings == ["a.log: argument enforce_eager has no experiment param (kept in the command)"]


def test_a_log_without_the_line_says_so():
    assert logimport.launch_of(None, "b.log") == ({}, "", ["b.log: no `non-default args:` line; the launch command is unknown"])
    assert logimport.launch_of("{oops", "b.log")[2] == [
        "b.log: the `non-default args:` line is not a Python dict; the launch command is unknown"]
