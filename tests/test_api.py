"""The library face (`orchestrator/__init__.py`): an exact `__all__`, every name documented, a
cheap import, and an experiment run and checked through it on the rehearsal host."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import orchestrator
from conftest import ROOT, free_port
from orchestrator import errors

def _public_names() -> set[str]:
    """What `orchestrator` offers besides its subpackages (which Python adds as they are imported)."""
    return {
        name for name, value in vars(orchestrator).items()
        if not name.startswith("_")
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith("orchestrator."))
    }


def _own_doc(value: object) -> str:
    """The docstring the object's author wrote (not the signature a dataclass makes up)."""
    doc = value.__dict__.get("__doc__") if isinstance(value, type) else getattr(value, "__doc__", None)
    if isinstance(value, type) and dataclasses.is_dataclass(value) and (doc or "").startswith(f"{value.__name__}("):
        return ""
    return (doc or "").strip()


def test_all_is_exact_and_every_name_is_importable_and_documented():
    for name in orchestrator.__all__:
        getattr(orchestrator, name)  # loads the lazy ones
    assert len(set(orchestrator.__all__)) == len(orchestrator.__all__)
    assert _public_names() == set(orchestrator.__all__)
    undocumented = [name for name in orchestrator.__all__ if not _own_doc(getattr(orchestrator, name))]
    assert not undocumented, undocumented


def test_every_error_of_errors_py_is_on_the_face():
    raised = {name for name, value in vars(errors).items()
              if isinstance(value, type) and issubclass(value, errors.OrchError)}
    assert raised <= set(orchestrator.__all__), raised - set(orchestrator.__all__)
    assert all(issubclass(getattr(orchestrator, n), errors.OrchError) for n in raised)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'run_one'"):
        orchestrator.run_one  # noqa: B018


def test_importing_the_package_loads_nothing_heavy():
    probe = ("import sys, orchestrator; print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('sqlmodel', 'sqlalchemy', 'asyncssh', 'asyncio', 'jinja2', 'typer', 'rich', 'numpy') "
             "or m.startswith(('orchestrator.run', 'orchestrator.store', 'orchestrator.remote', "
             "'orchestrator.host', 'orchestrator.cli'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_a_signature_names_only_what_the_face_offers():
    """Callers read the signatures: every parameter has a default or is the experiment file."""
    for name in ("run_experiment", "run_experiment_async", "check_experiment", "check_experiment_async"):
        params = inspect.signature(getattr(orchestrator, name)).parameters
        assert list(params)[0] == "spec"
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in list(params.values())[1:]), name


# --- through the face, on the rehearsal host ---


@pytest.fixture
def experiment(project: Path) -> Path:
    """The demo experiment, with a short workload and a free port."""
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    assert "requests: 16" in text and "port: 30000" in text
    path = project / "experiments" / "eagle_debug.yaml"
    path.write_text(text.replace("requests: 16", "requests: 4").replace("port: 30000", f"port: {free_port()}"))
    return path


def test_load_spec_reads_the_experiment_and_names_file_and_line_of_a_mistake(experiment):
    spec = orchestrator.load_spec(experiment)
    assert isinstance(spec, orchestrator.Spec) and spec.name == "eagle_debug"
    experiment.write_text(experiment.read_text() + "\nbogus_key: 1\n")
    with pytest.raises(orchestrator.SpecError, match=rf"{experiment}:\d+: unknown key 'bogus_key'"):
        orchestrator.load_spec(experiment)


def test_run_experiment_records_a_run_and_resume_skips_it(project, experiment):
    db = f"sqlite:///{project / 'orch.db'}"
    said: list[tuple[str, str]] = []
    outcomes = orchestrator.run_experiment(experiment, inventory=project / "inventory.yaml", db=db,
                                           variants=["fixed"], report=lambda host, message: said.append((host, message)))
    assert [(o.variant, o.host, o.status) for o in outcomes] == [("fixed", "local", "succeeded")], outcomes
    assert isinstance(outcomes[0], orchestrator.Outcome) and outcomes[0].metrics["accept_len"] > 1.2
    # where: the host, or a run's `variant@host #id`
    assert said and all(re.fullmatch(r"(fixed@)?local( #\d+)?", where) for where, _ in said), said
    record = orchestrator.Store(db).record(orchestrator.Store(db).get(outcomes[0].uid))
    assert record["variant"] == "fixed" and record["status"] == "succeeded"
    # the same plan again with resume: already succeeded with the same fingerprint, nothing runs
    again = orchestrator.run_experiment(experiment, inventory=project / "inventory.yaml", db=db,
                                        variants=["fixed"], resume=True)
    assert again == []
    assert len(orchestrator.Store(db).runs("eagle_debug")) == 1


def test_check_experiment_reports_the_story_finding_without_running(project, experiment):
    groups = orchestrator.check_experiment(experiment, inventory=project / "inventory.yaml", variants=["story"])
    assert [(g["variant"], g["host"]) for g in groups] == [("story", "local")]
    codes = {f["code"]: f for f in groups[0]["findings"]}
    assert codes["algorithm-not-eagle3"]["severity"] == "error" and codes["algorithm-not-eagle3"].get("allowed")
    assert not (project / "orch.db").exists(), "a check records nothing"
    json.dumps(groups)  # what `orch check --json` prints


def test_the_async_twin_runs_on_the_callers_loop_and_a_dry_run_changes_nothing(project, experiment):
    async def caller() -> list:
        return await orchestrator.run_experiment_async(experiment, inventory=project / "inventory.yaml",
                                                       db=f"sqlite:///{project / 'orch.db'}", dry_run=True)

    outcomes = asyncio.run(caller())
    assert sorted(o.variant for o in outcomes) == ["fixed", "story"]
    assert all(o.run_id is None for o in outcomes)
    assert orchestrator.Store(f"sqlite:///{project / 'orch.db'}").runs() == []


def test_bad_input_raises_before_any_host_is_touched(project, experiment):
    with pytest.raises(orchestrator.SpecError, match="no host or tag 'nowhere'"):
        orchestrator.run_experiment(experiment, inventory=project / "inventory.yaml",
                                    db=f"sqlite:///{project / 'orch.db'}", hosts=["nowhere"])
    assert not (project / "host").exists()


def test_the_face_is_what_the_readme_shows():
    """The module docstring's example uses only names of the face."""
    example = [line.strip() for line in (orchestrator.__doc__ or "").splitlines() if "orch." in line]
    used = {word.split("(")[0].split(".")[1] for line in example for word in line.split() if word.startswith("orch.")}
    assert used and used <= set(orchestrator.__all__), used

