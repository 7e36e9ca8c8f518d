"""Diagnosis of real logs (tests/fixtures/logs/README.md names each excerpt's thread): other
loggers' wrapping, frames never taken for the error, a cause printed above the crash header, model
modules SGLang skipped (first when a patch of the run touched them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.engines.sglang import skipped
from orchestrator.engines.sglang.logs import diagnose, parse_log, parse_log_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def _never_a_frame(found) -> None:
    assert 'File "' not in found.summary
    assert not any(line.lstrip().startswith('File "') for line in found.evidence)


def test_lines_wrapped_by_another_logger_are_unwrapped_and_frames_are_never_the_error():
    text = (FIXTURES / "wrapped_logger.log").read_text()
    found = diagnose(text)
    assert found.kind == "scheduler-exception"
    assert found.evidence[0].startswith("ValueError: Unsupported architectures: ['Qwen2_5_VLForConditionalGeneration']")
    assert found.evidence[1].startswith("[2025-03-08 02:04:48 TP0] Scheduler hit an exception")
    _never_a_frame(found)
    assert parse_log_bytes(text.encode()).diagnosis == found


def test_a_traceback_without_its_exception_never_names_a_frame():
    text = ("[2026-01-01 00:00:00] Scheduler hit an exception: Traceback (most recent call last):\n"
            'File "/x/sglang/srt/managers/scheduler.py", line 2502, in run_scheduler_process\n'
            "scheduler.event_loop_overlap()\n"
            'File "<frozen runpy>", line 88, in _run_code\n')
    found = diagnose(text)
    assert found.kind == "scheduler-exception" and "see the traceback" in found.summary
    _never_a_frame(found)


def test_the_cause_printed_above_the_crash_header_is_named():
    found = diagnose((FIXTURES / "cause_above.log").read_text())
    assert found.kind == "scheduler-exception"
    assert "ValueError: Model architectures ['DeepseekOCRForCausalLM'] are not supported" in found.summary
    assert "printed above the crash header" in found.summary
    assert found.evidence[0].startswith("ValueError: Model architectures")
    _never_a_frame(found)


def test_the_exception_after_the_header_wins_over_lines_above():
    found = diagnose((FIXTURES / "scheduler_exception.log").read_text())
    assert "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'" in found.summary
    assert "traceback ends at the evidence line" in found.summary


def test_a_wrapped_healthy_log_has_no_diagnosis():
    lines = (FIXTURES / "wrapped_logger.log").read_text().splitlines()
    healthy = "\n".join(line for line in lines if "02:04:48" not in line)
    assert diagnose(healthy) is None


PATCHED = "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/kimi_k25.py"


@pytest.mark.parametrize("patched", [[PATCHED], ["sglang:srt/models/kimi_k25.py"]])
def test_a_patched_module_that_no_longer_imports_is_the_diagnosis(patched):
    text = (FIXTURES / "patched_module_import.log").read_text()
    found = diagnose(text, patched)
    assert found.kind == "patched-module-import"
    assert found.summary.startswith(f"The patched file {patched[0]}, line 612 no longer imports (unexpected indent")
    assert "KimiK25ForConditionalGeneration" in found.summary and "\n" not in found.summary
    assert found.evidence[0].endswith("loading sglang.srt.models.kimi_k25: unexpected indent (kimi_k25.py, line 612)")
    assert parse_log_bytes(text.encode(), patched=patched).diagnosis == found
    big = (FIXTURES / "clean.log").read_bytes() * 2000 + text.encode()  # ~3 MB of traffic before it
    assert parse_log_bytes(big, patched=patched).diagnosis == found


def test_a_skipped_module_is_named_in_another_failure():
    found = diagnose((FIXTURES / "patched_module_import.log").read_text())
    assert found.kind == "scheduler-exception"
    assert "SGLang also skipped modules it could not import: sglang.srt.models.glm4v_moe" in found.summary
    assert "sglang.srt.models.kimi_k25 (unexpected indent (kimi_k25.py, line 612))" in found.summary
    assert found.evidence[0].startswith("ValueError: Model architectures ['KimiK25ForConditionalGeneration']")


@pytest.mark.parametrize("patched", [[], [PATCHED], ["sglang:srt/models/llama_eagle3.py"]])
def test_skipped_modules_alone_are_no_failure(patched):
    """Hosts often lack a package some model file needs: a healthy log stays healthy."""
    text = (FIXTURES / "import_errors_healthy.log").read_text()
    assert diagnose(text, patched) is None and parse_log(text, patched=patched).diagnosis is None
    assert diagnose((FIXTURES / "clean.log").read_text(), [PATCHED]) is None


def test_skipped_module_lines_of_each_release():
    lines = ["[2025-08-24 06:25:37 TP7] Ignore import error when loading sglang.srt.models.glm4v_moe: No module "
             "named 'transformers.models.glm4v_moe'",
             "[2025-08-24 06:25:37 TP0] Ignore import error when loading sglang.srt.models.glm4v_moe: No module "
             "named 'transformers.models.glm4v_moe'",
             "[2025-07-01 10:00:00] Ignore import error when loading sglang.srt.models.mllama4. No module named 'x'"]
    found = skipped.skipped_modules(lines)
    assert [(s.module, s.error) for s in found] == [
        ("sglang.srt.models.glm4v_moe", "No module named 'transformers.models.glm4v_moe'"),
        ("sglang.srt.models.mllama4", "No module named 'x'")]
    assert skipped.patched_file("sglang.srt.models.mllama4", ["/a/sglang/srt/models/mllama4.py"]) is not None
    assert skipped.patched_file("sglang.srt.models.mllama4", ["/a/sglang/srt/models/xmllama4.py"]) is None
    assert skipped.patched_file("sglang.srt.models.deepseek", ["sglang:srt/models/deepseek/__init__.py"])


def _failed_run(tmp_path, patch_file: str | None):
    """The diagnosis of the whole log of a failed run, read knowing the file its patch touched."""
    text = (FIXTURES / "patched_module_import.log").read_text()
    return engines.get("sglang").parse_log(text.encode(), "EAGLE3-DEBUG", [patch_file] if patch_file else []).diagnosis


def test_a_failed_runs_diagnosis_names_its_patched_module_that_no_longer_imports(tmp_path):
    found = _failed_run(tmp_path, PATCHED)
    assert found.kind == "patched-module-import" and found.summary.startswith(f"The patched file {PATCHED}")
    assert found.decisive  # it replaces the diagnosis made when the server died


def test_a_failed_runs_diagnosis_stays_when_its_patches_touched_no_skipped_module(tmp_path):
    found = _failed_run(tmp_path, "/x/sglang/srt/models/llama_eagle3.py")
    assert found.kind == "scheduler-exception" and not found.decisive
    assert _failed_run(tmp_path / "no-patch", None).kind == "scheduler-exception"
