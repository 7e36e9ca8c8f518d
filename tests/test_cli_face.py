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
    "run": {"spec_path": "plan_runs.spec", "hosts": "plan_runs.hosts", "overrides": "plan_runs.overrides",
            "variants": "plan_runs.variants", "dry_run": "plan_runs.dry_run", "resume": "plan_runs.resume",
            "no_preflight": "plan_runs.no_preflight", "allow_busy_gpus": "plan_runs.allow_busy_gpus",
            "accept_drift": "plan_runs.accept_drift", "wait": "plan_runs.wait"},
    "render": {"spec_path": "render_runs.spec", "hosts": "render_runs.hosts", "overrides": "render_runs.overrides",
               "variants": "render_runs.variants"},
    "check": {"spec_path": "check_experiment.spec", "hosts": "check_experiment.hosts",
              "overrides": "check_experiment.overrides", "variants": "check_experiment.variants", "as_json": OUTPUT},
    "show": {"run_ref": "show_run.run", "as_json": OUTPUT, "requests": "run_requests"},
    "diff": {"run_a": "diff_runs.run_a", "run_b": "diff_runs.run_b", "everything": "diff_runs.everything",
             "as_json": OUTPUT, "where": "diff_configurations.where", "vs": "diff_configurations.vs"},
    "revert": {"host": "revert_patches.hosts", "force": "revert_patches.force"},
    "stop": {"run_ref": "stop_runs.run", "host": "stop_runs.hosts", "every": "stop_runs.every",
             "sweep": "stop_runs.sweep"},
    "import": {"log": "import_log.log", "experiment": "import_log.experiment", "name": "import_log.name",
               "params": "import_log.params", "host": "import_log.host", "debug_pattern": "import_log.debug_pattern",
               "secret": "import_log.secrets"},
    "hosts check": {"hosts": "check_hosts.hosts", "port": "check_hosts.port", "timeout": "check_hosts.timeout",
                    "as_json": OUTPUT},
    "ls": {"experiment": "list_runs.experiment", "status": "list_runs.status", "host": "list_runs.host",
           "where": "list_runs.where", "sort": "list_runs.sort", "limit": "list_runs.limit", "mine": "list_runs.mine",
           "tags": "list_runs.tags", "as_json": "list_runs_json", "as_csv": "list_runs_csv"},
    "tag": {"run_ref": "tag_run.run", "tags": "tag_run.tags", "remove": "tag_run.remove"},
    "note": {"run_ref": "note_run.run", "text": "note_run.text", "clear": "note_run.clear"},
    "compare": {"experiment": "compare_configurations.experiment", "where": "compare_configurations.where",
                "by": "compare_configurations.by", "as_json": OUTPUT, "as_csv": "compare_csv", "metrics": OUTPUT},
    "series": {"run_ref": "run_series.run", "kind": "run_series.kind", "as_csv": OUTPUT},
    "logs": {"run_ref": "run_log.run", "follow": "run_log.follow", "debug": "run_log.debug", "node": "run_log.node"},
    "report": {"experiment": "write_report.experiment", "out": "write_report.out", "by": "write_report.by"},
    "hosts": {},  # list_hosts: the inventory's hosts, no option
    "patches": {"host": "list_patches.hosts", "as_json": OUTPUT},
    "clean": {"host": "clean_hosts.hosts", "older_than": "clean_hosts.older_than", "big_logs": "clean_hosts.big_logs",
              "dry_run": "clean_hosts.dry_run"},
    "doctor": {"target": "doctor.target", "variant": "doctor.variant", "hosts": "doctor.hosts",
               "no_preflight": "doctor.no_preflight", "wait": "doctor.wait", "as_json": OUTPUT},
}
# The face function each command calls, where its options name none (a command without options)
CALLS = {"hosts": "list_hosts"}
# An option that is a parameter of a second function too: `orch diff EXPERIMENT --vs ...`
ALSO = {"diff": {"run_a": "diff_configurations.experiment"}}
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
    "diff_configurations": {"db"}, "write_report": {"db"}, "plan_runs": {"db", "inventory"},
    "render_runs": {"inventory"}, "list_hosts": {"inventory"}, "list_patches": {"db", "inventory"},
    "clean_hosts": {"db", "inventory"}, "doctor": {"db", "inventory"}, "tag_run": {"db"}, "note_run": {"db"},
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
    named = set(FACE) | CLI_ONLY
    assert commands == named, f"a command with no face function (give it one, and map it in FACE): {commands ^ named}"
    for name, function in CALLS.items():
        assert callable(getattr(orchestrator, function, None)), f"orch {name}: no {function} on the face"


def test_every_option_of_a_command_on_the_face_is_a_parameter_of_its_function():
    commands = _commands()
    unmapped, missing = [], []
    for name, mapping in FACE.items():
        for param in commands[name].params:
            assert param.name is not None
            if param.name not in mapping:
                unmapped.append(f"orch {name}: {param.name}")
            elif mapping[param.name] != OUTPUT and not _on_the_face(mapping[param.name]):
                missing.append(f"orch {name} {param.name}: no parameter {mapping[param.name]}")
    assert not unmapped, f"options with no face parameter (add one, and map it in FACE): {unmapped}"
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


# What a face function takes besides the command's options: the globals, and how it tells its progress
NOT_AN_OPTION = {"db", "inventory", "report", "write"}


def test_every_parameter_of_a_commands_function_is_an_option_of_the_command():
    """The other way round: what the library can ask, the command line can ask too (the flag that
    picks another function aside: that function's parameters are the same command's options)."""
    commands = _commands()
    for name, mapping in FACE.items():
        reached: dict[str, set[str]] = {}
        for target in [*mapping.values(), *ALSO.get(name, {}).values()]:
            assert target == OUTPUT or _on_the_face(target), target
            function, dot, parameter = target.partition(".")
            if dot:
                reached.setdefault(function, set()).add(parameter)
        for function, parameters in reached.items():
            left = set(inspect.signature(getattr(orchestrator, function)).parameters) - parameters - NOT_AN_OPTION
            assert not left, f"orch {name}: {function} takes {left}, which no option of the command gives"
        assert commands[name].params or name in CALLS


def test_run_experiment_takes_what_orch_run_plans_with():
    planned = set(inspect.signature(orchestrator.plan_runs).parameters)
    assert set(inspect.signature(orchestrator.run_experiment).parameters) == planned | {"report"}
