"""YAML that explodes: huge integers, aliases of aliases (billion laughs), deep nesting. Each is one
line naming the file and line, exit 2, well within a second, in an experiment and in an inventory,
and nothing on the host changes."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from orchestrator.core import yamlfile
from orchestrator.errors import SpecError
from support.cli import orch_main
from support.corpus import build
from support.files import modes_snapshot


def billion_laughs(levels: int = 9) -> str:
    """Nine aliases of the level below at each level: 9**levels values from a few hundred bytes."""
    lines = ["lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    for level in range(1, levels + 1):
        lines.append(f"lol{level}: &lol{level} [" + ", ".join([f"*lol{level - 1}"] * 9) + "]\n")
    return "".join(lines)


HOSTILE = {
    # Python refuses to convert more than 4300 decimal digits: a traceback, before
    "decimal-digits": ("big: " + "9" * 100_000 + "\n", r"x\.yaml:1: integer 9{20}\.\.\. \(100000 characters\) "
                       r"is beyond a sane size \(at most 9223372036854775807\); write a smaller number, or quote it"),
    # hexadecimal and base-60 texts convert without Python's limit, into numbers nothing can store
    "hexadecimal": ("big: 0x" + "f" * 100_000 + "\n", r"x\.yaml:1: integer 0xf+\.\.\. .*beyond a sane size"),
    "base-60": ("big: " + ":".join(["59"] * 30_000) + "\n", r"x\.yaml:1: integer 59:59:.* beyond a sane size"),
    "just-past-64-bits": ("big: 9223372036854775808\n", r"x\.yaml:1: integer 9223372036854775808 is beyond"),
    "negative": ("big: -99999999999999999999999\n", r"x\.yaml:1: integer -99999999999999999999999 is beyond"),
    "key": ("99999999999999999999999: x\n", r"x\.yaml:1: integer 99999999999999999999999 is beyond"),
    "billion-laughs": (billion_laughs(), r"x\.yaml:5: alias \*lol3 makes the file expand to more than 10000 "
                       r"values .*; use fewer aliases or write the values out"),
    "merge-laughs": ("a: &a {x: 1, y: 2, z: 3}\n" + "".join(
        f"m{i}: &m{i} [" + ", ".join([f"*{'a' if i == 0 else f'm{i - 1}'}"] * 9) + "]\n" for i in range(8)),
        r"x\.yaml:\d+: alias \*m\d makes the file expand"),
    "recursive-alias": ("a: &a [1, [2, *a]]\n", r"x\.yaml:1: alias \*a is used inside its own anchor"),
    "deep-flow-lists": ("a: " + "[" * 100_000 + "]" * 100_000 + "\n",
                        r"x\.yaml:1: values are nested more than 64 deep; flatten the mapping or list"),
    "deep-flow-mappings": ("a: " + "{b: " * 50_000 + "1" + "}" * 50_000 + "\n", r"x\.yaml:1: values are nested"),
    "deep-block-mappings": ("".join(" " * i + f"k{i}:\n" for i in range(2000)) + " " * 2000 + "k: 1\n",
                            r"x\.yaml:64: values are nested more than 64 deep"),
    "deep-block-lists": ("a:\n" + "".join(" " * i + "-\n" for i in range(2000)),
                         r"x\.yaml:\d+: values are nested more than 64 deep"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_yaml_is_one_line_within_a_second(name):
    text, error = HOSTILE[name]
    started = time.monotonic()
    with pytest.raises(SpecError) as caught:
        yamlfile.loads(text, "x.yaml")
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300, message
    assert re.search(error, message), message
    assert elapsed < 1.0, f"{name}: {elapsed:.2f} s"


def test_values_inside_the_limits_are_read_as_written():
    text = (f"big: {yamlfile.MAX_INTEGER}\nsmall: -{yamlfile.MAX_INTEGER}\nhex: 0xff\nsexagesimal: 1:30\n"
            "quoted: '99999999999999999999999'\nfloat: 1.5e+30\n"
            + "deep: " + "[" * 60 + "1" + "]" * 60 + "\n"
            + "block:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(60)) + " " * 61 + "leaf: 1\n"
            + "base: &base {a: 1, b: 2}\n" + "".join(f"copy{i}: *base\n" for i in range(100))
            + "merged: {<<: *base, c: 3}\n")
    data = yamlfile.loads(text, "ok.yaml")
    assert data["big"] == 2**63 - 1 and data["small"] == -(2**63 - 1) and data["hex"] == 255
    assert data["sexagesimal"] == 90 and data["quoted"] == "99999999999999999999999" and data["float"] == 1.5e30
    assert data["copy99"] == {"a": 1, "b": 2} and data["merged"] == {"a": 1, "b": 2, "c": 3}
    deep = data["deep"]
    for _ in range(59):
        deep = deep[0]
    assert deep == [1]


# (billion laughs is the reader's alone: PyYAML shares an alias's value, so it explodes only in what
# walks the values later, and an unknown key stops orch before that)
@pytest.mark.parametrize("name", ["decimal-digits", "deep-flow-lists", "deep-block-mappings"])
@pytest.mark.parametrize("where", ["experiment", "inventory"])
def test_hostile_yaml_in_an_orch_command_is_one_line_exit_2_and_changes_nothing(host, tmp_path: Path, name, where):
    workdir, places = host
    text, _ = HOSTILE[name]
    project = build({where: {"append": text}, "args": []}, tmp_path, places)
    file = "exp.yaml" if where == "experiment" else "inventory.yaml"
    before = modes_snapshot(workdir)
    code, out, err, crash = orch_main(project, ["run", "exp.yaml"])
    shown = f"exit {code}\nstdout:\n{out}\nstderr:\n{err[:2000]}\n{crash or ''}"
    assert crash is None and code == 2, shown
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 400, shown
    assert re.search(rf"{re.escape(str(project / file))}:\d+: ", lines[0]) or f"{file}:" in lines[0], shown
    assert modes_snapshot(workdir) == before
