"""Hostile values in every field that reaches a host: shell metacharacters, quotes, newlines, tabs,
globs, a leading `-`, 100 KB, `${VAR}`, `{{ }}` and bytes that are not UTF-8. Each either arrives
intact (read back from the argv and environment the launch script really gives the server, from
the server's own log, from the files on the host) or is refused with one clear line; and a canary
file that any successful injection would create never appears.

Launch-script level: the real template rendered by orch and run by bash, with a stand-in Python
that records its argv and environment. Full runs: the rehearsal SGLang on this machine and over a
real OpenSSH sshd, with a hostile workdir, checkpoint destination, checkpoint file name, patch
text, env value and server argument at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sshd
from conftest import ROOT
from orchestrator.run import execute
from orchestrator.core import inventory as inventories, plancheck, render, spec as specs
from orchestrator.rehearsal import sglang as sim
from orchestrator.errors import SpecError
from support.cli import orch_main

SGLANG_REHEARSAL = sim.STAND_IN

TEMPLATE = ROOT / "templates" / "sglang_launch.sh.j2"
BASE = (Path(__file__).parent / "bad_inputs" / "base" / "experiment.yaml").read_text()
MODEL_LINE = '  model_path: "{{ host.rehearsal }}/checkpoints/llama-target"\n'


def hostile(canary: Path) -> dict[str, str]:
    """One value per kind; every shell-active one would create `canary` if a shell ran it."""
    c = str(canary)
    return {
        "semicolon": f"a; touch {c}; b",
        "subshell": f"$(touch {c})",
        "backticks": f"`touch {c}`",
        "quotes": f"'\"'; touch {c}; echo \"'",
        "newline": f"a\ntouch {c}\nb",
        "tab": f"a\tb\t;touch {c}",
        "glob": f"* ? [a-z]* {canary.parent}/*",
        "leading-dash": "--version -rf",
        "100kb": "x" * 100_000 + f"$(touch {c})",
        "dollar-var": "${HOME} $HOME ${PATH:-x} $$",
        "jinja": "{{ 7 * 7 }}",
    }


KINDS = list(hostile(Path("/c")))
NOT_UTF8 = "\udce9"  # the command-line byte 0xe9, as Python holds it; in YAML the escape "\udce9"


def experiment(model_path: str | None = None, env: dict[str, str] | None = None, extra: str = "") -> str:
    """The corpus's healthy experiment with a model_path and env values of our choosing."""
    text = BASE.replace("@FREE_PORT@", "30000")
    if model_path is not None:
        text = text.replace(MODEL_LINE, f"  model_path: {json.dumps(model_path)}\n")
    lines = "".join(f"  {name}: {json.dumps(value)}\n" for name, value in (env or {}).items())
    return text.replace("env:\n", "env:\n" + lines) + extra


# ---- launch-script level: the real template, run by bash -----------------------------------------

STAND_IN = """#!/bin/sh
# a stand-in for the host's Python: records what the launch script gives it
printf '%s\\0' "$@" > "$(dirname "$0")/argv"
printf '%s' "$HOSTILE_VALUE" > "$(dirname "$0")/env_value"
"""


def launch(folder: Path, text: str, overrides: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """Load the experiment `text`, render its launch script for a local rehearsal host as a run
    would and run it with bash: the argv and the HOSTILE_VALUE the server gets."""
    (folder / "templates").mkdir()
    (folder / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
    python = folder / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    (folder / "exp.yaml").write_text(text)
    spec = specs.load(folder / "exp.yaml")
    plans = specs.expand(spec, list(overrides))
    plancheck.check(spec, plans, list(overrides))
    host = inventories.Host(name="local", transport="local", workdir=str(folder / "work"), python=str(python),
                            gpus=8, rehearsal=sim.DEFAULT_RELEASE)
    context = execute.run_context(spec, plans[0], host, "hostile-run")
    (folder / "launch.sh").write_text(render.launch_script(spec.template, context))
    done = subprocess.run(["bash", str(folder / "launch.sh")], cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return (folder / "argv").read_text().split("\0")[:-1], (folder / "env_value").read_text()


def escaped(value: str) -> str:
    """`value` as an env value must be written to arrive as it is: `${NAME}` there comes from the
    controller's shell, `$${NAME}` is the literal `${NAME}`."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", r"$${\1}", value)


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_param_from_the_file_reaches_the_server_intact(tmp_path, kind):
    canary = tmp_path / "canary"
    value = hostile(canary)[kind]
    argv, _ = launch(tmp_path, experiment(model_path=value))
    assert after(argv, "--model-path") == ("49" if kind == "jinja" else value)  # a param's {{ }} is a template
    assert not canary.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_param_from_the_command_line_reaches_the_server_intact(tmp_path, kind):
    canary = tmp_path / "canary"
    value = hostile(canary)[kind]
    argv, _ = launch(tmp_path, experiment(), (f"model_path={value}",))
    assert after(argv, "--model-path") == ("49" if kind == "jinja" else value)
    assert not canary.exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given", ["file", "--set"])
def test_a_hostile_env_value_reaches_the_server_intact(tmp_path, kind, given):
    canary = tmp_path / "canary"
    value = hostile(canary)[kind]
    literal = escaped(value)
    text, overrides = (experiment(env={"HOSTILE_VALUE": literal}), ()) if given == "file" else \
        (experiment(), (f"env.HOSTILE_VALUE={literal}",))
    _, received = launch(tmp_path, text, overrides)
    assert received == value  # `{{ }}` in env is not a template: it arrives as written
    assert not canary.exists()


def test_a_hostile_extra_argument_reaches_the_server_as_one_argument(tmp_path):
    canary = tmp_path / "canary"
    values = list(hostile(canary).values())
    argv, _ = launch(tmp_path, experiment().replace(
        "  port: 30000\n", f"  port: 30000\n  extra_args: {json.dumps(values)}\n"))
    start = argv.index(values[0])
    assert argv[start:start + len(values)] == values  # a list's items are not templates: all as written
    assert not canary.exists()


def test_a_sandbox_escape_in_a_param_is_refused(tmp_path):
    canary = tmp_path / "canary"
    with pytest.raises(SpecError, match="refused by the template sandbox"):
        launch(tmp_path, experiment(model_path="{{ cycler.__init__.__globals__.os.system('touch %s') }}" % canary))  # noqa: UP031 (no brace doubling)
    assert not canary.exists()


def test_a_controller_variable_that_is_not_set_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCH_HOSTILE_UNSET", raising=False)
    with pytest.raises(SpecError, match=r"\$\{ORCH_HOSTILE_UNSET\} is not set in this shell"):
        launch(tmp_path, experiment(env={"HOSTILE_VALUE": "${ORCH_HOSTILE_UNSET}"}))


@pytest.mark.parametrize("where", ["param", "env"])
def test_text_that_is_not_unicode_is_refused(tmp_path, where):
    text = experiment()
    if where == "param":
        text = text.replace("  mem_fraction_static: 0.85\n", '  mem_fraction_static: "0.8\\udce9"\n')
    else:
        text = text.replace("env:\n", 'env:\n  HOSTILE_VALUE: "a\\udce9"\n')
    (tmp_path / "exp.yaml").write_text(text)
    with pytest.raises(SpecError, match=r"exp\.yaml:\d+: .* is not Unicode text"):
        specs.load(tmp_path / "exp.yaml")
    with pytest.raises(SpecError, match="not UTF-8 text"):
        specs.parse_overrides([f"model_path=/m/{NOT_UTF8}" if where == "param" else f"env.HOSTILE_VALUE={NOT_UTF8}"])


# ---- names: identifiers only ---------------------------------------------------------------------

NAME_FIELDS = {
    "experiment": lambda text, name: text.replace("name: corpus\n", f"name: {json.dumps(name)}\n"),
    "variant": lambda text, name: text.replace("  base:\n", f"  {json.dumps(name)}:\n"),
    "patch": lambda text, name: text.replace("  debug-print:\n", f"  {json.dumps(name)}:\n").replace(
        "[debug-print]", f"[{json.dumps(name)}]"),
}


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "leading-dash"])
@pytest.mark.parametrize("field", [*NAME_FIELDS, "host"])
def test_a_hostile_name_is_refused(tmp_path, kind, field):
    name = hostile(tmp_path / "canary")[kind]
    refused = rf"{field} name .* is not a name: use letters, digits"
    if kind == "100kb" and field != "experiment":  # YAML itself takes no key over 1024 characters
        refused = "YAML syntax error: mapping values are not allowed here"
    if field == "host":
        (tmp_path / "inventory.yaml").write_text(f"hosts:\n  {json.dumps(name)}:\n    transport: local\n")
        with pytest.raises(SpecError, match=rf"inventory\.yaml:2: {refused}"):
            inventories.load(tmp_path / "inventory.yaml")
        return
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
    (tmp_path / "exp.yaml").write_text(NAME_FIELDS[field](experiment(), name))
    with pytest.raises(SpecError, match=rf"exp\.yaml:\d+: {refused}"):
        specs.load(tmp_path / "exp.yaml")


def test_a_name_with_a_leading_dash_is_a_name_and_stays_one_word(tmp_path):
    """`-rf` is an identifier: names never reach a command line as an argument of their own."""
    text = NAME_FIELDS["variant"](NAME_FIELDS["experiment"](experiment(), "-rf"), "--help")
    argv, _ = launch(tmp_path, text)
    script = (tmp_path / "launch.sh").read_text()
    assert "experiment -rf, variant --help, host local." in script.splitlines()[1]
    assert "--help" not in argv


# ---- paths that reach a host: refused, nothing run -----------------------------------------------

@pytest.mark.parametrize("kind", ["semicolon", "subshell", "backticks", "quotes", "newline", "glob"])
def test_a_hostile_patch_file_path_is_not_found_and_runs_nothing(tmp_path, kind):
    canary = tmp_path / "canary"
    value = hostile(canary)[kind]
    project = tmp_path / "project"
    project.mkdir()
    (project / "templates").mkdir()
    (project / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
    (project / "inventory.yaml").write_text(
        f"hosts:\n  local:\n    transport: local\n    workdir: {json.dumps(str(tmp_path / 'work'))}\n    gpus: 8\n"
        "    rehearsal: true\n")
    (project / "exp.yaml").write_text(experiment().replace(
        "    file: sglang:srt/models/llama_eagle3.py\n", f"    file: {json.dumps('sglang:srt/' + value)}\n"))
    code, out, err, crash = orch_main(project, ["run", "exp.yaml", "--dry-run"])
    assert (code, crash) == (2, None), out + err
    [line] = err.splitlines()
    assert line.startswith("error: ") and "debug-print" in line, line
    assert ("control character" if kind == "newline" else "does not exist") in line, line
    assert not canary.exists()


# ---- whole runs: locally and over a real sshd -----------------------------------------------------

def hostile_run(tmp_path: Path) -> tuple[Path, str, str, Path, Path]:
    """A project whose one run carries hostile values everywhere they reach the host: its folder,
    the workdir, the env value, the checkpoint folder (with a hostile file name) and the canary."""
    canary = tmp_path / "canary"
    kinds = hostile(canary)
    value = "".join(v for k, v in kinds.items() if k != "100kb") + kinds["100kb"][-2000:]
    workdir = str(tmp_path / f"work dir;$(touch {canary})`touch {canary}`'q\"")
    drafts = tmp_path / "drafts"
    subprocess.run([sys.executable, str(SGLANG_REHEARSAL.checkpoint_maker), str(drafts)], check=True,
                   capture_output=True)
    draft = drafts / "eagle3-draft"
    odd_file = draft / "notes $(touch canary);`touch canary`'\" *.txt"  # a file name holds no `/`
    odd_file.write_text(value)
    project = tmp_path / "project"
    (project / "templates").mkdir(parents=True)
    (project / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
    dest = "{{ host.workdir }}/ck/draft;$(touch %s) `touch %s` 'q\" *" % (canary, canary)  # noqa: UP031 (no brace doubling)
    debug = ("      import os\n"
             f"      # {kinds['semicolon']} {kinds['subshell']} {kinds['backticks']} {kinds['quotes']}\n"
             f"      print('[HOSTILE-DEBUG] text=' + repr({json.dumps(value)}) + ' value='"
             # the line and its newline in one write: the server's access log, written by another
             # process at the same time, would otherwise land between them (stdout is unbuffered)
             " + repr(os.environ.get('HOSTILE_VALUE')) + '\\n', end='', flush=True)\n")
    text = experiment(env={"HOSTILE_VALUE": escaped(value)}).replace(
        '  draft_model_path: "{{ host.rehearsal }}/checkpoints/eagle3-draft"\n',
        '  draft_model_path: "{{ checkpoints.draft }}"\n').replace(
        '      print("[CORPUS-DEBUG] reached", flush=True)\n', debug).replace(
        "  port: 30000\n", f"  port: @PORT@\n  extra_args: {json.dumps(['--served-model-name', value])}\n")
    text += f"checkpoints:\n  - {{name: draft, src: {json.dumps(str(draft))}, dest: {json.dumps(dest)}}}\n"
    text += "debug_pattern: '\\[HOSTILE-DEBUG\\]'\n"
    (project / "exp.yaml").write_text(text)
    return project, workdir, value, odd_file, canary


def check_hostile_run(project: Path, workdir: str, value: str, odd_file: Path, canary: Path) -> None:
    from conftest import free_port

    exp = project / "exp.yaml"
    exp.write_text(exp.read_text().replace("@PORT@", str(free_port())))
    code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
    assert (code, crash) == (0, None), out + err + (crash or "")
    code, shown, _, _ = orch_main(project, ["show", "last", "--json"])
    record = json.loads(shown)
    assert record["status"] == "succeeded"
    # the patch's text and the env value (through the launch script and the server's environment),
    # printed by the patched code as it ran
    texts = {d["text"] for d in record["debug_lines"]}
    assert len(texts) == 1 and texts.pop().endswith(f"text={value!r} value={value!r}"), texts
    code, log, _, _ = orch_main(project, ["logs", "last"])
    assert f"served_model_name={value!r}" in log  # the server argument, as SGLang's server_args line prints it
    # the checkpoint, pushed to the hostile destination, hostile file name and all, bytes intact
    pushed = Path(workdir) / "ck" / f"draft;$(touch {canary}) `touch {canary}` 'q\" *"
    assert (pushed / odd_file.name).read_text() == value
    assert (pushed / "config.json").read_bytes() == (odd_file.parent / "config.json").read_bytes()
    assert all(p["state"] == "reverted" for p in record["patches"])
    assert not canary.exists() and not list(project.parent.rglob("canary"))


def test_a_local_run_with_hostile_values_everywhere(tmp_path):
    project, workdir, value, odd_file, canary = hostile_run(tmp_path)
    (project / "inventory.yaml").write_text(f"hosts:\n  local:\n    transport: local\n    workdir: {json.dumps(workdir)}\n"
                                            f"    gpus: 8\n    rehearsal: true\n    python: {sys.executable}\n")
    check_hostile_run(project, workdir, value, odd_file, canary)


@pytest.mark.skipif(sshd.sshd_missing() is not None, reason=sshd.sshd_missing() or "")
def test_a_run_over_ssh_with_hostile_values_everywhere(tmp_path, sshd_box, no_user_ssh):
    project, workdir, value, odd_file, canary = hostile_run(tmp_path)
    known = project / "known_hosts"
    known.write_text(sshd_box.known_line())
    entry = sshd_box.rehearsal_entry(known, Path("/WORKDIR"))
    assert "    workdir: /WORKDIR\n" in entry
    (project / "inventory.yaml").write_text("hosts:\n" + entry.replace("    workdir: /WORKDIR\n",
                                                                       f"    workdir: {json.dumps(workdir)}\n"))
    (project / "exp.yaml").write_text((project / "exp.yaml").read_text().replace("hosts: [local]", "hosts: [box]"))
    check_hostile_run(project, workdir, value, odd_file, canary)
