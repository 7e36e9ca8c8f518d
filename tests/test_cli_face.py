"""The CLI goes through the library face: every option of a command on the face is a parameter of
its function there (`orch diff --all` is `orchestrator.diff_runs(everything=...)`), read off the
typer app itself, so a new option without its parameter fails here.

A command's options map to `function.parameter`; to `function` alone, a flag that picks another
function of the face (`orch show --requests` is `run_requests`); or to OUTPUT: how the command
prints what the function returns (`--json`, `--csv`), which a caller of the library does for itself. The global
`--db` and `--inventory` are each function's `db` and `inventory` where it reads them.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer

import orchestrator
from orchestrator.cli import app

OUTPUT = "output"  # a format of the printout, not a parameter

# command -> {CLI parameter (its Python name): "face_function.parameter", "face_function" or OUTPUT}
FACE: dict[str, dict[str, str]] = {
    "run": {"spec_path": "run_experiment.spec", "hosts": "run_experiment.hosts",
            "overrides": "run_experiment.overrides", "variants": "run_experiment.variants",
            "dry_run": "run_experiment.dry_run", "resume": "run_experiment.resume",
            "no_preflight": "run_experiment.no_preflight", "allow_busy_gpus": "run_experiment.allow_busy_gpus",
            "accept_drift": "run_experiment.accept_drift", "wait": "run_experiment.wait"},
    "check": {"spec_path": "check_experiment.spec", "hosts": "check_experiment.hosts",
              "overrides": "check_experiment.overrides", "variants": "check_experiment.variants", "as_json": OUTPUT},
    "show": {"run_ref": "show_run.run", "as_json": OUTPUT, "requests": "run_requests"},
    "diff": {"run_a": "diff_runs.run_a", "run_b": "diff_runs.run_b", "everything": "diff_runs.everything",
             "as_json": OUTPUT, "where": "diff_configurations.where", "vs": "diff_configurations.vs"},
    "revert": {"host": "revert_patches.hosts", "force": "revert_patches.force"},
    "stop": {"run_ref": "stop_runs.run", "host": "stop_runs.hosts", "every": "stop_runs.every",
             "sweep": "stop_runs.sweep"},
    "import": {"log": "import_log.log", "name": "import_log.name", "params": "import_log.params",
               "host": "import_log.host", "debug_pattern": "import_log.debug_pattern", "secret": "import_log.secrets"},
    "hosts check": {"hosts": "check_hosts.hosts", "port": "check_hosts.port", "timeout": "check_hosts.timeout",
                    "as_json": OUTPUT},
    "ls": {"experiment": "list_runs.experiment", "status": "list_runs.status", "host": "list_runs.host",
           "where": "list_runs.where", "sort": "list_runs.sort", "limit": "list_runs.limit", "mine": "list_runs.mine",
           "as_json": "list_runs_json", "as_csv": "list_runs_csv"},
    "compare": {"experiment": "compare_configurations.experiment", "where": "compare_configurations.where",
                "by": "compare_configurations.by", "as_json": OUTPUT, "as_csv": "compare_csv", "metrics": OUTPUT},
    "series": {"run_ref": "run_series.run", "kind": "run_series.kind", "as_csv": OUTPUT},
    "logs": {"run_ref": "run_log.run", "follow": "run_log.follow", "debug": "run_log.debug", "node": "run_log.node"},
    "report": {"experiment": "write_report.experiment", "out": "write_report.out", "by": "write_report.by"},
}
GLOBAL = {"db": "db", "inventory": "inventory"}
# The command line's own: what a shell or a terminal asks of `orch` (a completion script, the
# version), no work a caller of the library would ask for.
CLI_ONLY = {"completion"}
CLI_ONLY_GLOBAL = {"version"}
FACE_GLOBALS = {  # which face functions read the database and the inventory
    "run_experiment": {"db", "inventory"}, "check_experiment": {"inventory"},
    "show_run": {"db"}, "run_requests": {"db"}, "diff_runs": {"db"}, "revert_patches": {"db", "inventory"},
    "stop_runs": {"db", "inventory"}, "check_hosts": {"inventory"},
    "import_log": {"db", "inventory"},
    "list_runs": {"db"}, "list_runs_json": {"db"}, "list_runs_csv": {"db"}, "run_series": {"db"},
    "run_log": {"db", "inventory"}, "compare_configurations": {"db"}, "compare_csv": {"db"},
    "diff_configurations": {"db"}, "write_report": {"db"},
}
# What is not on the face yet: command -> its options the face has no parameter for (every
# option, for a command with no function there). Struck off as the face grows.
NOT_YET = {
    "hosts": {"*"},  # hosts: the inventory's listing
    "render": {"*"}, "patches": {"*"}, "clean": {"*"},
    "doctor": {"*"},
}


def _commands() -> dict[str, Any]:
    """The app's commands by name, a group's as `GROUP COMMAND` beside the group itself, as click
    holds them (typer may carry its own click: read, not imported)."""
    found = {}
    for name, command in typer.main.get_command(app).commands.items():
        found[name] = command
        for sub, inner in getattr(command, "commands", {}).items():
            found[f"{name} {sub}"] = inner
    return found


def _parameter(target: str) -> inspect.Parameter | None:
    function, _, name = target.partition(".")
    return inspect.signature(getattr(orchestrator, function)).parameters.get(name)


def _on_the_face(target: str) -> bool:
    function, dot, _ = target.partition(".")
    if not dot:
        return callable(getattr(orchestrator, function, None))
    return _parameter(target) is not None


def test_every_command_is_on_the_face_or_named_as_not_yet():
    commands = set(_commands())
    named = set(FACE) | {c for c, left in NOT_YET.items() if "*" in left} | CLI_ONLY
    assert commands == named, commands ^ named


def test_every_option_of_a_command_on_the_face_is_a_parameter_of_its_function():
    commands = _commands()
    unmapped, missing = [], []
    for name, mapping in FACE.items():
        left = NOT_YET.get(name, set())
        for param in commands[name].params:
            assert param.name is not None
            if param.name in left:
                assert param.name not in mapping, f"{name} --{param.name}: mapped and named as not yet"
                continue
            if param.name not in mapping:
                unmapped.append(f"orch {name}: {param.name}")
            elif mapping[param.name] != OUTPUT and not _on_the_face(mapping[param.name]):
                missing.append(f"orch {name} {param.name}: no parameter {mapping[param.name]}")
    assert not unmapped, f"options with no face parameter (add one, or name it in NOT_YET): {unmapped}"
    assert not missing, missing


def test_a_flag_and_its_parameter_default_alike():
    """`orch run` without `--resume` is `run_experiment(resume=False)`: the same run either way."""
    commands = _commands()
    for name, mapping in FACE.items():
        for param in commands[name].params:
            target = mapping.get(param.name or "")
            if target in (None, OUTPUT) or "." not in target or not getattr(param, "is_flag", False):
                continue
            face = _parameter(target)
            assert face is not None and face.default is param.default, f"orch {name} {param.name}"


def test_the_global_options_are_the_face_functions_db_and_inventory():
    group = typer.main.get_command(app)
    assert {p.name for p in group.params} == set(GLOBAL) | CLI_ONLY_GLOBAL
    for function in {target.partition(".")[0] for mapping in FACE.values() for target in mapping.values()
                     if target != OUTPUT}:
        params = inspect.signature(getattr(orchestrator, function)).parameters
        assert {GLOBAL[g] for g in FACE_GLOBALS[function]} <= set(params), function
        assert not {"db", "inventory"} - FACE_GLOBALS[function] & set(params), function


def test_the_diff_arguments_default_as_the_command_does():
    diff = {p.name: p.default for p in _commands()["diff"].params}
    params = inspect.signature(orchestrator.diff_runs).parameters
    assert (params["run_a"].default, params["run_b"].default) == (diff["run_a"], diff["run_b"]) == ("last~1", "last")
