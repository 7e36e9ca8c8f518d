from pathlib import Path

import pytest

from orchestrator.core import spec
from orchestrator.errors import SpecError

BASE = """\
name: demo
hosts: [local]
template: ../templates/sglang_launch.sh.j2
params:
  tp_size: 8
  port: 30000
env:
  NCCL_DEBUG: INFO
patches:
  dbg:
    file: sglang:srt/models/llama_eagle3.py
    find: "x = 1"
    insert_after: "print(x)"
variants:
  baseline:
    patches: [dbg]
  bigger:
    params: {tp_size: 4}
    env: {EXTRA: "1"}
matrix:
  speculative_num_steps: [3, 5]
repeats: 2
"""


def write(project: Path, text: str) -> Path:
    path = project / "experiments" / "e.yaml"
    path.write_text(text)
    return path


def test_expand_variants_matrix_repeats_in_file_order(project):
    s = spec.load(write(project, BASE))
    plans = spec.expand(s)
    assert len(plans) == 2 * 2 * 2
    assert [p.variant for p in plans[:4]] == ["baseline"] * 4
    assert [p.params["speculative_num_steps"] for p in plans[:4]] == [3, 3, 5, 5]
    assert plans[0].patches[0].name == "dbg" and plans[4].patches == ()
    assert plans[4].params["tp_size"] == 4 and plans[4].env == {"NCCL_DEBUG": "INFO", "EXTRA": "1"}


def test_set_overrides_win_and_parse_yaml_scalars(project):
    s = spec.load(write(project, BASE))
    plans = spec.expand(s, ["tp_size=2", "env.NCCL_DEBUG=WARN", "flag=true"], ("bigger",))
    assert {p.variant for p in plans} == {"bigger"}
    assert plans[0].params["tp_size"] == 2 and plans[0].params["flag"] is True
    assert plans[0].env["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nbogus: 1\n", "e.yaml:3: unknown key 'bogus' in the experiment"),
        ("variants:\n  a:\n    patches: [nope]\n", "e.yaml:4: variant 'a' uses unknown patch 'nope'"),
        ("patches:\n  p:\n    file: /f\n    find: a\n", "e.yaml:3: patch 'p' needs exactly one of replace"),
        ("patches:\n  p:\n    find: a\n    replace: b\n", "e.yaml:3: patch 'p' needs `file:`"),
        ("repeats: 0\n", "e.yaml:2: `repeats` must be a whole number >= 1"),
        ("env:\n  1BAD: x\n", "e.yaml:3: '1BAD' is not a valid environment variable name"),
        ("matrix:\n  a: []\n", "e.yaml:3: matrix 'a' must be a non-empty list"),
        ("name: [unclosed\n", "e.yaml:3: YAML syntax error"),
        ("a: 1\na: 2\n", "e.yaml:3: key 'a' is written twice"),
        ("variants:\n  a:\n    expect: {accept_len: 'about 2'}\n", "expectation 'about 2' must look like '>= 2.0'"),
    ],
)
def test_bad_spec_names_file_line_and_fix(project, text, message):
    with pytest.raises(SpecError) as err:
        spec.load(write(project, "template: ../templates/sglang_launch.sh.j2\n" + text))
    assert message in str(err.value)


def test_missing_template_is_named(project):
    with pytest.raises(SpecError, match=r"e.yaml:1: template .*missing.j2 not found"):
        spec.load(write(project, "template: missing.j2\n"))


def test_controller_vars_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abc")
    assert spec.resolve_controller_vars("Bearer ${HF_TOKEN}", "x") == "Bearer hf_abc"
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(SpecError, match=r"\$\{HF_TOKEN\} is not set"):
        spec.resolve_controller_vars("${HF_TOKEN}", "x")


def test_bad_override_is_rejected():
    with pytest.raises(SpecError, match="expected key=value"):
        spec.parse_overrides(["tp_size"])


def test_repo_experiment_loads():
    root = Path(__file__).resolve().parent.parent
    s = spec.load(root / "experiments" / "eagle_debug.yaml")
    names = [v.name for v in s.variants]
    assert names == ["story", "fixed"]
    story, fixed = s.variants
    assert s.params["speculative_algorithm"] == "EAGLE" and story.allow == ("algorithm-not-eagle3",)
    assert fixed.params["speculative_algorithm"] == "EAGLE3" and "kimi-aux-capture" in fixed.patches
