"""The corpus of bad inputs (tests/bad_inputs/*.yaml): each is one clear line, the right exit code,
no traceback, and nothing on the host changed.

Every case is data: the files to write over a healthy project (tests/bad_inputs/base/), the `orch`
command line, the exit code and a regex of the one error line. The real `orch` command runs in this
process (its `main()`, as the `orch` script calls it) against a real rehearsal host on this machine,
shared by every case and installed once; its workdir is compared file by file before and after.

A case's keys:
  id            its name (the test id)
  experiment    the experiment file `exp.yaml`: a text replacing the base, or {edit: [[old, new]...],
                append: text}; `old` must be in the base, so a changed base cannot make a case pass
  inventory     the same for `inventory.yaml`
  files         {path: text} more files (a template, a diff, a log ...)
  bytes         {path: text} files written with `text.encode('latin-1')` (binary, Latin-1)
  sparse        {path: size} files of that many zero bytes (a 50 MB file, without writing 50 MB)
  folders       [path] empty folders (a directory given as a file, a checkpoint folder)
  remove        [path] base files to delete
  args          the command line after the global options
  global        the global options (default: --db and --inventory of the case's project)
  exit          the exit code (2 bad input, 3 a host)
  error         a regex searched in the error line
  anywhere      true: the error is in a run's progress line (stdout, wrapped), not the only line on stderr
Placeholders in every text and argument: @WORKDIR@ (the host's workdir), @PROJECT@ (the case's
folder), @FREE_PORT@, @BUSY_PORT@ (a port held by a listener), @CLOSED_PORT@ (nothing listens),
@PYTHON@ (this Python), @NOT_UTF8@ (a command-line byte that is not UTF-8).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cli import orch_main
from support.corpus import CORPUS, TEMPLATE, build, fill_in
from support.files import modes_snapshot

KEYS = {"id", "experiment", "inventory", "files", "bytes", "sparse", "folders", "remove", "args", "global",
        "exit", "error", "anywhere"}


def load_cases() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            assert set(case) <= KEYS, (path.name, case.get("id"), set(case) - KEYS)
            cases.append({**case, "source": path.name})
    return cases


CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input(case: dict[str, Any], host, tmp_path: Path) -> None:
    workdir, places = host
    project = build(case, tmp_path, places)
    fill = lambda text: fill_in(text, {**places, "@PROJECT@": str(project)})
    args = [fill(a) for a in case["args"]]
    global_args = [fill(a) for a in case["global"]] if "global" in case else None
    before = modes_snapshot(workdir)
    code, out, err, crash = orch_main(project, args, global_args)
    shown = f"{case['source']} {case['id']}: exit {code}\nstdout:\n{out}\nstderr:\n{err}\n{crash or ''}"
    assert crash is None, shown
    assert "Traceback" not in out + err, shown
    assert code == case["exit"], shown
    if case.get("anywhere"):  # a progress line or table cell, wrapped to the terminal's width: unwrapped
        lines = [" ".join((out + err).split())]
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert any(re.search(fill(case["error"]), line) for line in lines), shown
    assert modes_snapshot(workdir) == before, shown


def test_the_base_experiment_runs_and_succeeds(host, tmp_path: Path) -> None:
    """The corpus's base is healthy: a real run of it succeeds, so every case fails by its own change."""
    workdir, places = host
    project = build({"args": []}, tmp_path, places)
    code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
    assert (code, crash) == (0, None), out + err + (crash or "")
    assert "succeeded" in out and not err.strip()
    # `expect` may name exactly the metrics a run records
    from orchestrator.core import plancheck

    code, shown, _, _ = orch_main(project, ["show", "last", "--json"])
    assert set(json.loads(shown)["metrics"]) == set(plancheck.METRICS)


def test_the_corpus_covers_at_least_100_cases() -> None:
    assert len(CASES) >= 100
    assert len({c["id"] for c in CASES}) == len(CASES), "case ids must be unique"


# ---- the same rules staying silent on healthy inputs ------------------------------------------------

def render(host, tmp_path: Path, case: dict[str, Any], *args: str) -> str:
    """`orch render` of the base changed as `case` says; its output (it must succeed)."""
    workdir, places = host
    project = build({"args": [], **case}, tmp_path, places)
    code, out, err, crash = orch_main(project, ["render", "exp.yaml", *args])
    assert (code, crash, err) == (0, None, ""), out + err + (crash or "")
    return out


def test_keys_the_template_or_orch_reads_are_accepted(host, tmp_path: Path) -> None:
    out = render(host, tmp_path, {"experiment": {"append": "matrix:\n  speculative_num_steps: [3, 5]\n"}},
                 "--set", "mem_fraction_static=0.7", "--set", "port=31000")
    assert out.count("--speculative-num-steps 3") == 1 and out.count("--speculative-num-steps 5") == 1
    assert out.count("--mem-fraction-static 0.7") == 2 and out.count("--port 31000") == 2


def test_extra_params_and_params_read_by_name_count_as_read(host, tmp_path: Path) -> None:
    template = TEMPLATE.read_text().replace(
        "  --log-level", "  --a {{ params.by_attr | q }} --b {{ params['by_item'] | q }} "
                         "--c {{ params.get('by_get', 0) | q }} \\\n  --log-level")
    case = {"files": {"templates/launch.sh.j2": template}, "experiment": {"append": "extra_params: [indirect]\n"}}
    out = render(host, tmp_path, case, "--set", "by_attr=1", "--set", "by_item=2", "--set", "by_get=3",
                 "--set", "indirect=4")
    assert "--a 1 --b 2 --c 3" in out


def test_a_template_reading_params_as_a_whole_allows_any_key(host, tmp_path: Path) -> None:
    template = TEMPLATE.read_text().replace(
        "set -euo pipefail\n", "set -euo pipefail\n{% for k, v in params.items() %}# {{ k | q }}={{ v | q }}\n{% endfor %}")
    out = render(host, tmp_path, {"files": {"templates/launch.sh.j2": template}}, "--set", "anything=1")
    assert "# anything=1" in out


def test_set_values_are_literal_text_unless_plain_numbers_or_booleans(host, tmp_path: Path) -> None:
    out = render(host, tmp_path, {}, "--set", "model_path=/m #v2", "--set", "draft_model_path=~",
                 "--set", "mem_fraction_static=0x10", "--set", "tp_size=8", "--set", "disable_cuda_graph=false")
    assert "--model-path '/m #v2'" in out and "--speculative-draft-model-path '~'" in out
    assert "--mem-fraction-static 0x10" in out and "--tp-size 8" in out
    assert "--disable-cuda-graph" not in out
    (tmp_path / "again").mkdir()
    assert "--disable-cuda-graph" in render(host, tmp_path / "again", {}, "--set", "disable_cuda_graph=true")


def test_a_doubled_dollar_writes_a_literal_controller_variable(host, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ORCH_CORPUS_TOKEN", "from-the-shell")
    case = {"experiment": {"edit": [["env:\n", "env:\n  LITERAL: \"$${HOME}/x\"\n  FROM_SHELL: \"${ORCH_CORPUS_TOKEN}\"\n"]]}}
    out = render(host, tmp_path, case)
    assert "export LITERAL='${HOME}/x'" in out and "export FROM_SHELL=from-the-shell" in out
