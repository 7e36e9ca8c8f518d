import subprocess
from pathlib import Path

import pytest

from orchestrator.core import render, shell
from orchestrator.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value", ["plain", "with space", "it's", "$(touch /tmp/pwned)", "a;b|c", "`x`", "\n"])
def test_quoted_values_reach_the_command_unchanged(value):
    out = subprocess.run(["bash", "-c", "printf %s " + shell.quote(value)], capture_output=True, text=True).stdout
    assert out == value


def test_tilde_paths_expand_to_home_but_nothing_else_does():
    out = subprocess.run(["bash", "-c", "printf %s " + shell.path("~/a b/$x")], capture_output=True, text=True,
                         env={"HOME": "/h", "PATH": "/usr/bin:/bin"}).stdout
    assert out == "/h/a b/$x"


def context(**params):
    base = {"tp_size": 8, "mem_fraction_static": 0.8, "num_continuous_decode_steps": 1, "disable_cuda_graph": True,
            "speculative_algorithm": "EAGLE3", "draft_model_path": "/d r", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "model_path": "/m", "port": 30000}
    base.update(params)
    return {**base, "params": base, "env": {"HF_TOKEN": "x y"}, "experiment": "e", "variant": "v",
            "run": {"uid": "u", "dir": "/r", "log": "/r/server.log"},
            "host": {"name": "h", "python": "/usr/bin/python3", "gpus": 8}}


def test_template_renders_quoted_flags():
    script = render.render_file(ROOT / "templates" / "sglang_launch.sh.j2", context())
    assert "--speculative-draft-model-path '/d r'" in script
    assert "export HF_TOKEN='x y'" in script
    assert "--disable-cuda-graph" in script and "--tp-size 8" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_missing_param_names_template_line():
    ctx = context()
    del ctx["model_path"]
    with pytest.raises(SpecError, match=r"sglang_launch.sh.j2:\d+: 'model_path' is undefined; set it"):
        render.render_file(ROOT / "templates" / "sglang_launch.sh.j2", ctx)


def test_param_values_can_use_the_host():
    assert render.render_value("{{ host.name }}/x", {"host": {"name": "h"}}, "w") == "h/x"
    with pytest.raises(SpecError, match="w: cannot render"):
        render.render_value("{{ nope.x }}", {}, "w")


HOSTILE = [
    '{{ cycler.__init__.__globals__.os.system("touch PWNED") }}',
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ lipsum.__globals__['os'].popen('touch PWNED').read() }}",
    "{{ params.update({'x': 1}) }}",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_param_values_render_in_a_sandbox(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        render.render_value(value, {"host": {"name": "h"}, "params": {"a": 1}}, "e.yaml: param p")
    assert str(caught.value).startswith("e.yaml: param p")
    assert not (tmp_path / "PWNED").exists()


def test_templates_render_in_a_sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "t.sh.j2"
    template.write_text("echo ok\n{{ cycler.__init__.__globals__.os.system('touch PWNED') }}\n")
    with pytest.raises(SpecError) as caught:
        render.render_file(template, {})
    assert f"{template}:2" in str(caught.value)
    assert not (tmp_path / "PWNED").exists()
