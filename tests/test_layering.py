"""The floor plan, checked on the source: every module of `orchestrator/` parsed with `ast`.

Layers (a module's layer is its folder; the engine-neutral modules directly in `engines/` are the
engine *seam*, `engines/__init__.py` and `engines/registry.py` are the *registry*, the engine
packages `engines/<name>/` are *engines*):

    layer     folder / modules                            may import (besides its own layer)
    -------   -----------------------------------------   ---------------------------------------------
    records   records.py, bounds.py (the bottom floor)    nothing of orch's; every layer imports it
    errors    errors.py                                   records (typed evidence, e.g. a Diagnosis)
    rehearsal rehearsal/ (the engines' stand-ins)         nothing of orch's: its trees and releases, file facts
    registry  engines/__init__.py, engines/registry.py    seam (engine modules named as strings, loaded on use)
    seam      engines/base.py, fields, finding, ...       errors, core; host, remote in annotations only
    core      core/                                       errors, registry, rehearsal   (pure: see below)
    remote    remote/                                     errors, core
    store     store/                                      errors, core, seam
    host      host/                                       errors, core, seam, remote, store, rehearsal
    engines   engines/<name>/                             errors, core, seam, remote, store, host, registry
    run       run/                                        errors, core, seam, remote, store, host, engines
    report    report/                                     errors, core, seam, store, run
    cli       cli/                                        top (the library face), errors; below the face
                                                          only what CLI_NOT_YET_THROUGH_THE_FACE lists
    top       __init__.py and api/ (the library face),    every layer but cli
              testing.py
    tinymodels tinymodels/ (a maker of test models)       errors, host (checkpoint transforms); a leaf:
                                                          no other layer imports it

Every import counts: at the top, inside a function, under `if TYPE_CHECKING:` (a type is
knowledge of the layer it comes from, whether or not Python loads it). One exception, written in
TYPING_ONLY: the seam names the host session and the Connection its host-side code takes (the
Engine's host-side methods, the preflight's HostFiles), under `if TYPE_CHECKING:` only, so nothing
of host or remote is loaded with it.

The registry is data: each engine's name, launch template and the module of its preflight codes,
as strings; it imports an engine only when asked for one. core reads it (which engines an
experiment may name, their templates and codes).

Four rules beside the table:
(a) `core/` is pure: it imports no orch layer but the records, errors, the registry and the
    stand-ins' release lists (no engine, not even the seam) and none of asyncio, asyncssh, sqlmodel,
    sqlalchemy.
(b) third-party seams: asyncssh only in remote/, sqlmodel and sqlalchemy only in store/, typer and
    rich only in cli/, plotly only in report/, torch, transformers, tokenizers and safetensors only in
    tinymodels/ (it runs under the real engine's venv, never in orch's own).
(c) nothing outside `engines/` and `rehearsal/` (each stand-in is one engine's) names an engine: its
    package name in an identifier, an import or a string; its endpoints, JSON fields, log lines or
    programs in a string. Strings are the constants that do something: docstrings and other bare
    string statements are prose and may mention an engine; comments are not in the tree at all.
(d) `core/` (the host commands of `core/shell/` among it) names no engine's source layout in a
    string: the folders and names only an engine's own survey of its installed source reads
    (ENGINE_LAYOUT); core builds commands for every engine alike.

The rehearsal stand-ins live in `rehearsal/`, not beside the engines: `standin.py` (how a tree is
laid out and assembled), one declaration per engine (`sglang.py`, `vllm.py`) and the trees under
`rehearsal/trees/<engine>/`, which are programs copied to hosts, not orch modules: not scanned. No
engine module imports `rehearsal/`: the inventory (core) asks it which releases a host may emulate,
and the host's installer (`host/rehearsal.py`) asks it for an engine's stand-in by the engine's name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from support.modules import PACKAGE, Module, imports, orch_modules, parse

ALLOWED: dict[str, frozenset[str]] = {
    "records": frozenset(),
    "rehearsal": frozenset(),  # file facts only; no engine module imports it
    "errors": frozenset({"records"}),
    "registry": frozenset({"seam"}),
    "seam": frozenset({"errors", "core"}),
    "core": frozenset({"errors", "registry", "rehearsal"}),
    "remote": frozenset({"errors", "core"}),
    "store": frozenset({"errors", "core", "seam"}),
    "host": frozenset({"errors", "core", "seam", "remote", "store", "rehearsal"}),
    "engines": frozenset({"errors", "core", "seam", "remote", "store", "host", "registry"}),
    "run": frozenset({"errors", "core", "seam", "remote", "store", "host", "engines", "registry"}),
    "report": frozenset({"errors", "core", "seam", "store", "run"}),
    "cli": frozenset({"errors", "core", "seam", "remote", "store", "host", "engines", "run", "top", "registry",
                      "report"}),
    "top": frozenset({"errors", "core", "seam", "remote", "store", "host", "engines", "run", "registry", "report"}),
    "tinymodels": frozenset({"errors", "host"}),  # a leaf: in no other layer's set
}
TYPING_ONLY: dict[str, frozenset[str]] = {"seam": frozenset({"host", "remote"})}  # under `if TYPE_CHECKING:` only
BOTTOM_FLOOR = {"records", "bounds"}  # the modules every layer may import: they import nothing of orch's
FOLDERS = {"core", "remote", "store", "host", "run", "report", "cli", "tinymodels", "rehearsal"}  # a layer's own folder

# The CLI goes through the library face: a cli/ module imports the face (`orchestrator`), the bottom
# floor and errors (records and errors the face hands out), and cli/ itself (ui, text, and app: the
# typer layer). What a module still reaches past the face for is written here and struck off as the
# face grows: test_cli_goes_through_the_face fails on an import not listed and on a listed one gone.
CLI_DOORS = {"top", "records", "errors", "cli"}
CLI_NOT_YET_THROUGH_THE_FACE: dict[str, set[str]] = {}

CORE_FORBIDDEN_LIBRARIES = {"asyncio", "asyncssh", "sqlmodel", "sqlalchemy"}
LIBRARY_HOMES = {"asyncssh": "remote", "sqlmodel": "store", "sqlalchemy": "store", "typer": "cli", "rich": "cli",
                 "plotly": "report", "torch": "tinymodels", "transformers": "tinymodels", "tokenizers": "tinymodels",
                 "safetensors": "tinymodels"}

# What names an engine. Each term is engine knowledge found in engines/sglang or engines/vllm
# (test_terms_are_engine_knowledge keeps the list honest).
ENGINE_NAMES = ("sglang", "vllm")  # in any identifier, import or string, even inside a word
ENGINE_TERMS = (  # in a string, as a whole word or path (case ignored)
    # endpoints
    "/generate", "/health_generate", "/health", "/get_server_info", "/server_info", "/v1/completions", "/metrics",
    # JSON fields of their answers
    "meta_info", "spec_verify_ct", "spec_accept_length", "spec_accept_histogram",
    # log lines
    "The server is fired up", "Application startup complete", "Decode batch", "Prefill batch", "accept len",
    "SpecDecoding metrics", "server_args=",
    # programs
    "launch_server", "api_server",
)
_TERM_PATTERNS = [(term, re.compile(rf"(?<![a-z0-9]){re.escape(term.lower())}(?![a-z0-9])")) for term in ENGINE_TERMS]
# Rule (d): an engine's source layout, what its survey of the installed package greps for (case ignored).
ENGINE_LAYOUT = ("model_executor", "EntryClass", "is_eagle3", "set_eagle3_layers_to_capture")


def layer_of(dotted: str) -> str | None:
    """The layer of an orch module by its dotted name; None for a module the table does not place."""
    parts = dotted.split(".")
    if parts[0] != "orchestrator":
        return None
    if len(parts) == 1 or parts[1] == "api":  # the face, and the modules it re-exports
        return "top"
    if len(parts) == 2 and parts[1] in BOTTOM_FLOOR:
        return "records"
    if len(parts) == 2 and parts[1] == "errors":
        return "errors"
    if parts[1] in FOLDERS:
        return parts[1]
    if parts[1] == "engines":
        if len(parts) == 2 or parts[2:] == ["registry"]:
            return "registry"
        if (PACKAGE / "engines" / parts[2]).is_dir():
            return "engines"
        return "seam"
    if len(parts) == 2 and not (PACKAGE / parts[1]).is_dir():
        return "top"  # orchestrator/testing.py and the like
    return None


def typing_only_lines(module: Module) -> set[int]:
    """The lines of the imports under `if TYPE_CHECKING:` (annotations only: nothing is loaded)."""
    lines = set()
    for node in ast.walk(module.tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
            lines |= {inner.lineno for stmt in node.body for inner in ast.walk(stmt)
                      if isinstance(inner, (ast.Import, ast.ImportFrom))}
    return lines


def core_impurities(modules: list[Module]) -> list[str]:
    """Rule (a): what a core/ module imports beyond errors and the standard library's pure parts."""
    found = []
    for module in modules:
        if layer_of(module.name) != "core":
            continue
        for target, line in imports(module):
            layer = layer_of(target)
            top = target.split(".")[0]
            if top in CORE_FORBIDDEN_LIBRARIES:
                found.append(f"{module.where}:{line}: core imports {target}")
            elif layer is not None and layer not in {"core", "errors", "registry", "rehearsal", "records"}:
                found.append(f"{module.where}:{line}: core imports {target} ({layer})")
    return found


def upward_imports(modules: list[Module]) -> list[str]:
    """The table: every import of an orch module from a layer its own layer may not import."""
    found = []
    for module in modules:
        own = layer_of(module.name)
        if own is None:
            continue  # test_every_module_has_a_layer says so
        typing_only = typing_only_lines(module)
        for target, line in imports(module):
            layer = layer_of(target)
            if layer is None or layer == own or layer == "records" or layer in ALLOWED[own]:
                continue  # the bottom floor is every layer's
            if line in typing_only and layer in TYPING_ONLY.get(own, frozenset()):
                continue
            found.append(f"{module.where}:{line}: {own} imports {target} ({layer})")
    return found


def past_the_face(modules: list[Module]) -> dict[str, set[str]]:
    """What each cli/ module imports of orch's beyond the face, the bottom floor and cli/ itself
    (by file name: `orchestrator.` left off the targets)."""
    found: dict[str, set[str]] = {}
    for module in modules:
        if layer_of(module.name) != "cli":
            continue
        deep = {target.removeprefix("orchestrator.") for target, _ in imports(module)
                if layer_of(target) is not None and layer_of(target) not in CLI_DOORS}
        if deep:
            found[module.where.rpartition("/")[2]] = deep
    return found


def cross_engine_imports(modules: list[Module]) -> list[str]:
    """An engine package imports no other engine's: what two engines share lives in the seam."""
    found = []
    for module in modules:
        parts = module.name.split(".")
        if layer_of(module.name) != "engines" or len(parts) < 3:
            continue
        for target, line in imports(module):
            other = target.split(".")
            if layer_of(target) == "engines" and len(other) > 2 and other[2] != parts[2]:
                found.append(f"{module.where}:{line}: engine {parts[2]} imports {target}")
    return found


def misplaced_libraries(modules: list[Module]) -> list[str]:
    """Rule (b): a third-party library imported outside the one layer that wraps it."""
    found = []
    for module in modules:
        for target, line in imports(module):
            home = LIBRARY_HOMES.get(target.split(".")[0])
            if home is not None and layer_of(module.name) != home:
                found.append(f"{module.where}:{line}: {target} outside {home}/")
    return found


def _prose(tree: ast.Module) -> set[int]:
    """ids of the string constants that are statements of their own: docstrings and the like."""
    return {
        id(node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _identifiers(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.alias):
        yield node.name
        if node.asname:
            yield node.asname
    elif isinstance(node, ast.ImportFrom) and node.module:
        yield node.module


def _engine_words(text: str, *, string: bool) -> list[str]:
    low = text.lower()
    said = [name for name in ENGINE_NAMES if name in low]
    if string:
        said += [term for term, pattern in _TERM_PATTERNS if pattern.search(low)]
    return said


def engine_mentions(modules: list[Module]) -> list[str]:
    """Rule (c): every place outside engines/ and rehearsal/ that names an engine."""
    found = []
    for module in modules:
        if module.name.split(".")[:2] in (["orchestrator", "engines"], ["orchestrator", "rehearsal"]):
            continue
        prose = _prose(module.tree)
        for node in ast.walk(module.tree):
            line = getattr(node, "lineno", None) or "?"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                said = _engine_words(node.value, string=True)
                if said:
                    found.append(f"{module.where}:{line}: {', '.join(said)} in {node.value[:60]!r}")
            for name in _identifiers(node):
                said = _engine_words(name, string=False)
                if said:
                    found.append(f"{module.where}:{line}: {', '.join(said)} in the name {name}")
    return sorted(set(found), key=_by_place)


def core_engine_layout(modules: list[Module]) -> list[str]:
    """Rule (d): every string of a core/ module that names an engine's source layout."""
    found = []
    for module in modules:
        if layer_of(module.name) != "core":
            continue
        prose = _prose(module.tree)
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                said = [term for term in ENGINE_LAYOUT if term.lower() in node.value.lower()]
                if said:
                    found.append(f"{module.where}:{node.lineno}: {', '.join(said)} in {node.value[:60]!r}")
    return found


def _by_place(entry: str) -> tuple[str, int]:
    where, line, _ = entry.split(":", 2)
    return where, int(line) if line.isdigit() else 0


def _report(offences: list[str]) -> str:
    return f"{len(offences)} offence(s):\n" + "\n".join(offences)


# --- the checker itself: it fires on each kind of offence and stays silent on a healthy module ---


def test_core_rule_fires_on_engines_host_and_asyncio_and_stays_silent_on_errors():
    bad = parse("orchestrator/core/x.py", (
        "import asyncio\n"
        "from orchestrator.engines import base\n"
        "from orchestrator.errors import SpecError\n"
        "def f():\n"
        "    from orchestrator.host import push\n"
    ))
    healthy = parse("orchestrator/core/y.py", "import re\nfrom . import yamlfile\nfrom orchestrator.errors import SpecError\n")
    assert core_impurities([bad, healthy]) == [
        "orchestrator/core/x.py:1: core imports asyncio",
        "orchestrator/core/x.py:2: core imports orchestrator.engines.base (seam)",
        "orchestrator/core/x.py:5: core imports orchestrator.host.push (host)",
    ]


def test_table_fires_on_upward_imports_relative_and_under_type_checking():
    host = parse("orchestrator/host/x.py", (
        "from typing import TYPE_CHECKING\n"
        "from ..run import execute\n"
        "from orchestrator.engines.sglang import logs\n"
        "from orchestrator.engines.base import Diagnosis\n"
        "from . import journal\n"
        "from orchestrator.remote import base\n"
        "if TYPE_CHECKING:\n"
        "    from orchestrator.cli import ui\n"
    ))
    engine = parse("orchestrator/engines/sglang/x.py", "from orchestrator.host.session import HostSession\nfrom .. import base\n")
    seam = parse("orchestrator/engines/base.py", (
        "from typing import TYPE_CHECKING\n"
        "from orchestrator.core import spec\n"
        "from orchestrator.remote import base\n"
        "from orchestrator.host import push\n"
        "if TYPE_CHECKING:\n"
        "    from orchestrator.host.session import HostSession\n"
    ))
    registry = parse("orchestrator/engines/__init__.py", "from .base import Engine\nfrom .sglang import engine\n")
    core = parse("orchestrator/core/z.py", "from orchestrator import engines\n")
    assert upward_imports([host, engine, seam, registry, core]) == [
        "orchestrator/host/x.py:2: host imports orchestrator.run.execute (run)",
        "orchestrator/host/x.py:3: host imports orchestrator.engines.sglang.logs (engines)",
        "orchestrator/host/x.py:8: host imports orchestrator.cli.ui (cli)",
        "orchestrator/engines/base.py:3: seam imports orchestrator.remote.base (remote)",
        "orchestrator/engines/base.py:4: seam imports orchestrator.host.push (host)",
        "orchestrator/engines/__init__.py:2: registry imports orchestrator.engines.sglang.engine (engines)",
    ]


def test_tinymodels_is_a_leaf_no_layer_imports():
    """The model maker runs under another venv (torch): a module importing it would need that venv."""
    assert not any("tinymodels" in allowed for allowed in ALLOWED.values())
    cli = parse("orchestrator/cli/x.py", "from orchestrator.tinymodels import cache\n")
    maker = parse("orchestrator/tinymodels/x.py", "import torch\nfrom orchestrator.host import checkpoint\n"
                                                  "from orchestrator.run import execute\n")
    assert upward_imports([cli, maker]) == [
        "orchestrator/cli/x.py:1: cli imports orchestrator.tinymodels.cache (tinymodels)",
        "orchestrator/tinymodels/x.py:3: tinymodels imports orchestrator.run.execute (run)",
    ]
    assert misplaced_libraries([parse("orchestrator/host/y.py", "import torch\n"), maker]) == [
        "orchestrator/host/y.py:1: torch outside tinymodels/"]


def test_no_engine_reaches_its_stand_in_and_the_stand_ins_import_no_orch_layer():
    """The stand-ins are reached by the engine's name from core and host, never from an engine."""
    engine = parse("orchestrator/engines/sglang/x.py", "from orchestrator.rehearsal import sglang\n")
    registry = parse("orchestrator/engines/registry.py", "from orchestrator import rehearsal\n")
    stand_in = parse("orchestrator/rehearsal/x.py", "from orchestrator.core import spec\nfrom . import standin\n")
    host = parse("orchestrator/host/x.py", "from orchestrator.rehearsal import stand_in\n")
    core = parse("orchestrator/core/x.py", "from orchestrator import rehearsal\n")
    assert upward_imports([engine, registry, stand_in, host, core]) == [
        "orchestrator/engines/sglang/x.py:1: engines imports orchestrator.rehearsal.sglang (rehearsal)",
        "orchestrator/engines/registry.py:1: registry imports orchestrator.rehearsal (rehearsal)",
        "orchestrator/rehearsal/x.py:1: rehearsal imports orchestrator.core.spec (core)",
    ]
    assert engine_mentions([parse("orchestrator/rehearsal/y.py", "PACKAGE = 'sglang'\n")]) == []


def test_the_stand_in_trees_are_programs_not_scanned():
    names = {module.name for module in orch_modules()}
    assert {"orchestrator.rehearsal", "orchestrator.rehearsal.standin"} <= names
    assert (PACKAGE / "rehearsal" / "trees" / "sglang" / "sglang" / "__init__.py").is_file()
    assert not [name for name in names if name.startswith("orchestrator.rehearsal.trees")]


def test_cross_engine_rule_fires_on_another_engines_module_only():
    vllm = parse("orchestrator/engines/vllm/x.py", (
        "from orchestrator.engines.sglang.preflight_run import findings_for\n"
        "from orchestrator.engines.hostfiles import HostFiles\n"
        "from . import logs\n"
    ))
    assert cross_engine_imports([vllm]) == [
        "orchestrator/engines/vllm/x.py:1: engine vllm imports orchestrator.engines.sglang.preflight_run"]


def test_no_engine_imports_another():
    offences = cross_engine_imports(orch_modules())
    assert not offences, _report(offences)


def test_library_rule_fires_outside_the_wrapping_layer_only():
    modules = [
        parse("orchestrator/host/x.py", "import asyncssh\nfrom sqlmodel import select\n"),
        parse("orchestrator/remote/ssh.py", "import asyncssh\n"),
        parse("orchestrator/store/y.py", "from sqlalchemy import text\n"),
    ]
    assert misplaced_libraries(modules) == [
        "orchestrator/host/x.py:1: asyncssh outside remote/", "orchestrator/host/x.py:2: sqlmodel outside store/",
    ]


def test_engine_rule_fires_on_strings_names_and_imports_but_not_prose_or_engines():
    run = parse("orchestrator/run/x.py", (
        '"""Reads SGLang\'s /generate answers (prose)."""\n'
        "from orchestrator.engines.vllm import metrics\n"
        "def sglang_version(): return 'x'\n"
        "URL = f'{base}/generate'\n"
        "FIELD = 'meta_info'\n"
        "COLUMN = 'accept len'\n"
        "NOTE = 'accept length from the workload'\n"
        "def f():\n"
        "    '''a docstring naming vLLM'''\n"
        "    return 'Prefill batch'\n"
    ))
    engine = parse("orchestrator/engines/sglang/x.py", "READY = 'The server is fired up'\nimport sglang\n")
    assert engine_mentions([run, engine]) == [
        "orchestrator/run/x.py:2: vllm in the name orchestrator.engines.vllm",
        "orchestrator/run/x.py:3: sglang in the name sglang_version",
        "orchestrator/run/x.py:4: /generate in '/generate'",
        "orchestrator/run/x.py:5: meta_info in 'meta_info'",
        "orchestrator/run/x.py:6: accept len in 'accept len'",
        "orchestrator/run/x.py:10: Prefill batch in 'Prefill batch'",
    ]


def test_layout_rule_fires_on_core_strings_only():
    core = parse("orchestrator/core/shell/x.py", (
        '"""Greps model_executor (prose)."""\n'
        "SURVEY = 'grep -rl is_eagle3 model_executor'\n"
        "AWK = '/^EntryClass/'\n"
    ))
    engine = parse("orchestrator/engines/sglang/x.py", "SURVEY = 'cd model_executor'\n")
    assert core_engine_layout([core, engine]) == [
        "orchestrator/core/shell/x.py:2: model_executor, is_eagle3 in 'grep -rl is_eagle3 model_executor'",
        "orchestrator/core/shell/x.py:3: EntryClass in '/^EntryClass/'",
    ]


def test_terms_are_engine_knowledge():
    """Each term of rules (c) and (d) is said somewhere in an engine's package: the lists name engine
    knowledge, not words orch owns."""
    engine_text = "\n".join(
        path.read_text().lower() for name in ENGINE_NAMES for path in (PACKAGE / "engines" / name).rglob("*.py")
    )
    unknown = [term for term in (*ENGINE_TERMS, *ENGINE_LAYOUT) if term.lower() not in engine_text]
    assert not unknown, f"terms no engine package uses: {unknown}"


def test_every_module_has_a_layer():
    unplaced = [m.where for m in orch_modules() if layer_of(m.name) is None]
    assert not unplaced, f"place these in the table of {__name__}: {unplaced}"


# --- the house ---


def test_core_is_pure():
    offences = core_impurities(orch_modules())
    assert not offences, _report(offences)


def test_nothing_imports_upward():
    offences = upward_imports(orch_modules())
    assert not offences, _report(offences)


def test_third_party_libraries_stay_behind_their_layer():
    offences = misplaced_libraries(orch_modules())
    assert not offences, _report(offences)


def test_nothing_outside_engines_names_an_engine():
    offences = engine_mentions(orch_modules())
    assert not offences, _report(offences)


def test_core_names_no_engine_source_layout():
    offences = core_engine_layout(orch_modules())
    assert not offences, _report(offences)


def test_cli_past_the_face_rule_reads_each_command_module():
    runs = parse("orchestrator/cli/runs.py", (
        "import orchestrator\n"
        "from orchestrator.errors import EXIT_OK\n"
        "from orchestrator.records import MetricInfo\n"
        "from . import ui\n"
        "from .app import app\n"
        "def f():\n"
        "    from orchestrator.run import sweep\n"
    ))
    assert past_the_face([runs]) == {"runs.py": {"run.sweep"}}


def test_cli_goes_through_the_face():
    found = past_the_face(orch_modules())
    new = {where: deep - CLI_NOT_YET_THROUGH_THE_FACE.get(where, set()) for where, deep in found.items()}
    gone = {where: listed - found.get(where, set()) for where, listed in CLI_NOT_YET_THROUGH_THE_FACE.items()}
    new, gone = ({where: left for where, left in each.items() if left} for each in (new, gone))
    assert not new, f"cli/ reaching past the face (give the face the function): {new}"
    assert not gone, f"strike these off CLI_NOT_YET_THROUGH_THE_FACE: {gone}"
