"""A draft that ships its own tokenizer is compared with its target's, token by token: the same
vocabulary written otherwise agrees, moved ids are an error that names examples, extra tokens a
warning. Through `orch check` on the rehearsal SGLang and on the real vLLM with the tiny target's
real tokenizer.json; the doctor names the cause from the finding."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.engines import tokenizers
from orchestrator.run.doctor import causes
from orchestrator.run.doctor.evidence import Evidence
from support.cli import orch

VOCAB = {"<s>": 0, "</s>": 1, "the": 2, "cat": 3, "sat": 4}


def tokenizer_json(vocab: dict[str, int], added: tuple[str, ...] = ("<s>", "</s>"), indent: int | None = None) -> bytes:
    doc = {"version": "1.0", "added_tokens": [{"id": vocab[t], "content": t, "special": True} for t in added],
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<s>"}}
    return json.dumps(doc, indent=indent).encode()


def codes(target: bytes, draft: bytes, name: str = "tokenizer.json") -> dict[str, tokenizers.Finding]:
    found = tokenizers.compare(tokenizers.parse(name, target), tokenizers.parse(name, draft), "/t", "/d")
    return {f.code: f for f in found}


def test_the_same_vocabulary_written_otherwise_agrees():
    assert codes(tokenizer_json(VOCAB), tokenizer_json(dict(reversed(VOCAB.items())), indent=2)) == {}


def test_moved_ids_are_an_error_naming_examples():
    moved = {**VOCAB, "cat": 4, "sat": 3}
    found = codes(tokenizer_json(VOCAB), tokenizer_json(moved))["tokenizer-mismatch"]
    assert found.severity == "error"
    assert "maps 2 of the target's 5 tokens" in found.what and "'cat': 3 in the target's, 4 in the draft's" in found.what


def test_a_token_the_draft_lacks_is_a_mismatch_and_extra_tokens_a_warning():
    fewer = {k: v for k, v in VOCAB.items() if k != "sat"}
    assert "'sat': 4 in the target's, absent" in codes(tokenizer_json(VOCAB), tokenizer_json(fewer))["tokenizer-mismatch"].what
    more = {**VOCAB, "dog": 5}
    assert codes(tokenizer_json(VOCAB), tokenizer_json(more))["tokenizer-added-tokens"].severity == "warning"


def test_tiktoken_and_unigram_forms_are_read_token_by_token():
    def tiktoken(vocab: dict[str, int]) -> bytes:
        return b"".join(base64.b64encode(t.encode()) + f" {i}\n".encode() for t, i in vocab.items())
    assert codes(tiktoken(VOCAB), tiktoken(VOCAB) + b"\n", "tiktoken.model") == {}
    assert "tokenizer-mismatch" in codes(tiktoken(VOCAB), tiktoken({**VOCAB, "the": 3, "cat": 2}), "tiktoken.model")
    unigram = {"model": {"type": "Unigram", "vocab": [["the", -1.0], ["cat", -2.0]]}}
    swapped = {"model": {"type": "Unigram", "vocab": [["cat", -2.0], ["the", -1.0]]}}
    assert "tokenizer-mismatch" in codes(json.dumps(unigram).encode(), json.dumps(swapped).encode())


def test_an_unread_form_that_differs_is_a_warning():
    assert codes(b"\x0a\x01a", b"\x0a\x01b", "tokenizer.model")["tokenizer-differs"].severity == "warning"


def test_the_doctor_names_the_vocabulary_cause_from_the_finding():
    finding = {"severity": "error", "code": "tokenizer-mismatch", "what": "x maps 2 of 5", "why": "another tokenizer"}
    evidence = Evidence(run_id=1, status="succeeded", accept_len=1.02, params={}, probes={}, probe_lines={},
                        per_position=(0.01,), findings=(finding,), diagnosis=None)
    decided = causes.decide(evidence)
    assert decided.cause == "vocab-mismatch" and decided.rule == "preflight"
    assert decided.evidence[0] == "preflight ERROR tokenizer-mismatch: x maps 2 of 5"


def _findings(project: Path, spec: str, *args: str) -> tuple[int, dict[str, dict]]:
    done = orch(project, "check", spec, "--json", *args)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    return done.returncode, {f["code"]: f for g in json.loads(done.stdout) for f in g["findings"]}


def test_orch_check_on_the_rehearsal_names_a_draft_with_another_tokenizer(demo: Path, project: Path):
    assert _findings(project, str(demo), "--variant", "fixed")[0] == 0  # installs the rehearsal's checkpoints
    checkpoints = project / "host" / "rehearsal" / "checkpoints"
    (checkpoints / "kimi-k25-target" / "tokenizer.json").write_bytes(tokenizer_json(VOCAB))
    shutil.copytree(checkpoints / "eagle3-draft", checkpoints / "eagle3-draft-tok")
    (checkpoints / "eagle3-draft-tok" / "tokenizer.json").write_bytes(tokenizer_json({**VOCAB, "the": 3, "cat": 2}))
    before = sorted(p.name for p in checkpoints.iterdir())
    code, found = _findings(project, str(demo), "--variant", "fixed",
                            "--set", "draft_model_path={{ host.rehearsal }}/checkpoints/eagle3-draft-tok")
    assert code == 2 and found["tokenizer-mismatch"]["severity"] == "error"
    assert "'the': 2 in the target's, 3 in the draft's" in found["tokenizer-mismatch"]["what"]
    assert sorted(p.name for p in checkpoints.iterdir()) == before  # a check changes nothing on the host


@pytest.mark.realvllm
def test_orch_check_on_the_real_vllm_reads_the_tiny_targets_real_tokenizer(tmp_path: Path):
    import realvllm

    models = realvllm.models()
    project = tmp_path / "project"
    for folder, name in (("templates", "vllm_launch.sh.j2"), ("experiments", "vllm_real.yaml")):
        (project / folder).mkdir(parents=True)
        shutil.copy(ROOT / folder / name, project / folder / name)
    (project / ".tinymodels").symlink_to(models)
    target = json.loads((models / "target" / "tokenizer.json").read_text())
    vocab = target["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two words trade ids: another tokenizer
    draft = project / "draft-other-tokenizer"
    shutil.copytree(models / "draft", draft)
    (draft / "tokenizer.json").write_text(json.dumps(target))
    spec = project / "experiments" / "vllm_real.yaml"
    spec.write_text(spec.read_text().replace("src: ../.tinymodels/draft,", "src: ../draft-other-tokenizer,", 1))
    (project / "inventory.yaml").write_text(f"hosts:\n  vllm-cpu:\n    transport: local\n"
                                            f"    workdir: {project / 'host'}\n    python: {realvllm.python()}\n")
    code, found = _findings(project, "experiments/vllm_real.yaml", "--variant", "fitting")
    assert code == 2, found
    assert f"{first!r}: {vocab[second]} in the target's, {vocab[first]} in the draft's" in found["tokenizer-mismatch"]["what"]
    assert not (project / "host" / "checkpoints").exists()  # nothing was pushed


def test_vllms_heterogeneous_vocabulary_is_not_a_mismatch():
    from orchestrator.engines.vllm.preflight_run import same_vocabulary

    assert same_vocabulary({"model": "/d", "method": "eagle3"})
    assert not same_vocabulary({"model": "/d", "method": "draft_model", "use_heterogeneous_vocab": True})
