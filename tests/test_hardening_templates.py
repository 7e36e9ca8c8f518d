"""Hostile templates: includes that leave the template's folder (by `..`, an absolute name or a
symlink), a template from a folder nobody trusted, and renders that never end, overflow, eat memory
or write without bound. Each is one line naming template:line (exit 2 from `orch`), and nothing on
the host changes."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from orchestrator.core import render
from orchestrator.errors import SpecError
from support.cli import orch_main
from support.corpus import build
from support.files import modes_snapshot

SECRET = "SECRET-FROM-OUTSIDE"


def one_line(exc: pytest.ExceptionInfo[SpecError]) -> str:
    message = str(exc.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def refused_run(host, project: Path, args: list[str] | None = None) -> str:
    """`orch run exp.yaml --dry-run` in `project`: exit 2, one error line (returned), the host unchanged."""
    workdir, _ = host
    before = modes_snapshot(workdir)
    code, out, err, crash = orch_main(project, args or ["run", "exp.yaml", "--dry-run"])
    shown = f"exit {code}\nstdout:\n{out}\nstderr:\n{err}\n{crash or ''}"
    assert crash is None and code == 2, shown
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert SECRET not in out + err
    assert modes_snapshot(workdir) == before
    return lines[0]


def with_include(host, tmp_path: Path, include: str) -> Path:
    """A corpus project whose launch template starts by including `include`; outside the project,
    a template that would print SECRET."""
    _, places = host
    project = build({"args": []}, tmp_path, places)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "evil.j2").write_text(f"echo {SECRET}\n")
    launch = project / "templates" / "launch.sh.j2"
    launch.write_text(f"{{% include {include!r} %}}\n" + launch.read_text())
    return project


# -- includes and imports stay in the template's folder ------------------------------------------


@pytest.mark.parametrize("include", ["../../outside/evil.j2", "{outside}/evil.j2"])
def test_an_include_outside_the_templates_folder_is_refused(host, tmp_path, include):
    project = with_include(host, tmp_path, include.format(outside=tmp_path / "outside"))
    line = refused_run(host, project)
    assert re.search(r"launch\.sh\.j2:1: '.*evil\.j2' is outside the template's folder .*templates", line), line


def test_an_include_through_a_symlink_out_of_the_folder_is_refused(host, tmp_path):
    project = with_include(host, tmp_path, "helpers.j2")
    (project / "templates" / "helpers.j2").symlink_to(tmp_path / "outside" / "evil.j2")
    line = refused_run(host, project)
    assert "launch.sh.j2:1: 'helpers.j2' is outside the template's folder" in line, line
    assert "symlinks resolved" in line


def test_an_import_through_a_linked_folder_is_refused_when_rendering(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "macros.j2").write_text(f"{{% macro m() %}}{SECRET}{{% endmacro %}}")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "lib").symlink_to(tmp_path / "outside")
    template = tmp_path / "templates" / "t.j2"
    template.write_text("#!/bin/sh\n{% import 'lib/macros.j2' as lib %}\necho {{ lib.m() }}\n")
    with pytest.raises(SpecError) as caught:
        render.render_file(template, {})
    assert re.search(r"t\.j2:2: 'lib/macros\.j2' is outside the template's folder", one_line(caught))


def test_includes_inside_the_folder_still_work(tmp_path):
    (tmp_path / "templates" / "parts").mkdir(parents=True)
    (tmp_path / "templates" / "parts" / "env.j2").write_text("export A={{ a | q }}\n")
    (tmp_path / "templates" / "shared.j2").symlink_to(tmp_path / "templates" / "parts" / "env.j2")
    template = tmp_path / "templates" / "t.j2"
    template.write_text("{% include 'parts/env.j2' %}{% include 'shared.j2' %}exec true\n")
    assert render.render_file(template, {"a": "x y"}) == "export A='x y'\nexport A='x y'\nexec true\n"


def test_a_missing_include_is_one_line(tmp_path):
    template = tmp_path / "t.j2"
    template.write_text("echo\n{% include 'nosuch.j2' %}\n")
    with pytest.raises(SpecError) as caught:
        render.render_file(template, {})
    assert re.search(rf"t\.j2:2: template 'nosuch\.j2' not found in {re.escape(str(tmp_path))}; fix the include",
                     one_line(caught))


# -- where a template may come from -----------------------------------------------------------


def outside_template(host, tmp_path: Path, link: bool = False) -> Path:
    """A corpus project whose `template:` is a copy of its launch template in a folder outside it
    (or a link inside the project to that copy)."""
    _, places = host
    project = build({"args": []}, tmp_path, places)
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(project / "templates" / "launch.sh.j2", shared / "launch.sh.j2")
    if link:
        (project / "templates" / "launch.sh.j2").unlink()
        (project / "templates" / "launch.sh.j2").symlink_to(shared / "launch.sh.j2")
    else:
        text = (project / "exp.yaml").read_text()
        (project / "exp.yaml").write_text(text.replace("template: templates/launch.sh.j2",
                                                       f"template: {shared / 'launch.sh.j2'}"))
    return project


@pytest.mark.parametrize("link", [False, True], ids=["path", "symlink"])
def test_a_template_outside_the_trusted_folders_is_refused(host, tmp_path, link):
    project = outside_template(host, tmp_path, link)
    line = refused_run(host, project)
    assert re.search(r"exp\.yaml:5: template .*launch\.sh\.j2 .*is outside the folders templates come from "
                     r"\(.*\); move it into one, or name its folder under `template_folders:` in the experiment "
                     r"or the inventory", line), line
    assert ("a link to" in line) == link


@pytest.mark.parametrize("where", ["experiment", "inventory"])
def test_a_folder_named_under_template_folders_is_trusted(host, tmp_path, where):
    project = outside_template(host, tmp_path, link=True)
    file = project / ("exp.yaml" if where == "experiment" else "inventory.yaml")
    file.write_text(file.read_text() + "template_folders: [../shared]\n")
    code, out, err, crash = orch_main(project, ["run", "exp.yaml", "--dry-run"])
    assert (code, crash) == (0, None), out + err + (crash or "")


def test_template_folders_must_name_folders(host, tmp_path):
    _, places = host
    project = build({"inventory": {"append": "template_folders: [nosuch]\n"}, "args": []}, tmp_path, places)
    line = refused_run(host, project)
    assert re.search(r"inventory\.yaml:\d+: `template_folders` names 'nosuch', which is not a folder", line), line


def test_the_shipped_templates_and_the_projects_templates_folder_are_trusted(tmp_path):
    experiment = tmp_path / "experiments" / "e.yaml"
    folders = render.trusted_folders(experiment)
    assert render.is_trusted(render.SHIPPED_TEMPLATES / "sglang_launch.sh.j2", folders)
    assert render.is_trusted(tmp_path / "templates" / "t.j2", folders)
    assert render.is_trusted(tmp_path / "experiments" / "sub" / "t.j2", folders)
    assert not render.is_trusted(tmp_path / "t.j2", folders)
    assert not render.is_trusted(tmp_path / "templates-evil" / "t.j2", folders)


# -- rendering is bounded --------------------------------------------------------------------


@pytest.fixture
def quick_bounds(monkeypatch):
    monkeypatch.setattr(render, "RENDER_SECONDS", 2.0)
    monkeypatch.setattr(render, "RENDER_MEMORY", 256 << 20)


def rendered(tmp_path: Path, text: str) -> str:
    template = tmp_path / "t.j2"
    template.write_text(text)
    started = time.monotonic()
    with pytest.raises(SpecError) as caught:
        render.render_file(template, {"n": 100000})
    assert time.monotonic() - started < 8
    return one_line(caught)


@pytest.mark.timeout(60)
def test_a_render_that_never_ends_is_stopped(tmp_path, quick_bounds):
    line = rendered(tmp_path, "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}")
    assert re.search(r"t\.j2: rendering took more than 2 s .*; make the template do less", line), line


@pytest.mark.timeout(60)
def test_a_number_too_big_to_compute_is_stopped(tmp_path, quick_bounds):
    line = rendered(tmp_path, "echo\n{{ 10 ** 2000000000 }}\n")
    assert "rendering took more than 2 s" in line or "memory" in line, line


@pytest.mark.timeout(60)
def test_a_render_that_eats_memory_is_one_line(tmp_path, quick_bounds):
    line = rendered(tmp_path, "echo\n{{ 'x' * 1000000000 }}\n")
    assert re.search(r"t\.j2:2: cannot render: it needs more than 256 MiB of memory", line), line


def test_an_overflow_is_one_line(tmp_path):
    line = rendered(tmp_path, "echo\necho {{ 2.0 ** 100000 }}\n")
    assert re.search(r"t\.j2:2: cannot render: OverflowError: .*; fix the template or the value", line), line


def test_a_division_by_zero_is_one_line(tmp_path):
    line = rendered(tmp_path, "echo {{ 1 // 0 }}\n")
    assert re.search(r"t\.j2:1: cannot render: ZeroDivisionError", line), line


def test_output_past_the_bound_is_one_line(tmp_path):
    line = rendered(tmp_path, "{% for i in range(n) %}{{ 'x' * 100 }}\n{% endfor %}")
    assert re.search(r"t\.j2: cannot render: the output passes 1 MiB", line), line


def test_a_hostile_value_is_bounded_too(quick_bounds):
    started = time.monotonic()
    with pytest.raises(SpecError) as caught:
        render.render_value("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ x }}",
                            {"x": 1}, "exp.yaml: param p")
    assert time.monotonic() - started < 8
    assert re.search(r"exp\.yaml: param p: rendering took more than 2 s", one_line(caught))


def test_a_value_of_lookups_renders_without_a_child(monkeypatch):
    def no_fork() -> int:
        raise AssertionError("forked for a plain value")

    monkeypatch.setattr(os, "fork", no_fork)
    context = {"host": {"rehearsal": "/w/r"}, "params": {"n": 3}}
    assert render.render_value("{{ host.rehearsal }}/c/{{ params['n'] }}", context, "here") == "/w/r/c/3"


def test_a_run_with_an_overflowing_template_is_one_line_exit_2(host, tmp_path):
    _, places = host
    project = build({"args": []}, tmp_path, places)
    launch = project / "templates" / "launch.sh.j2"
    launch.write_text(launch.read_text() + "# {{ 2.0 ** 100000 }}\n")
    line = refused_run(host, project)
    assert re.search(r"launch\.sh\.j2:\d+: cannot render: OverflowError", line), line
