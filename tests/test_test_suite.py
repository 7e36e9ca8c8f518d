"""The test suite's own layering: test files share helpers through tests/support and conftest.py,
never by importing another test file, and run orch through support.cli's one runner."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Files that still import another test file, by path under tests/; each leaves this set once its
# helpers live in tests/support (one listed here that no longer needs it fails). Keep it empty.
NOT_YET_MOVED: set[str] = set()


def breaches(path: Path) -> list[str]:
    """What in a test file breaks the layering: imports of test modules, `def orch(`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0].startswith("test_"):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0].startswith("test_")]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "orch":
            found.append(f"line {node.lineno}: def orch(  (use support.cli.orch or orch_main)")
    return found


def python_files() -> list[Path]:
    """The suite's own modules: test files, conftest.py, the helpers beside them and tests/support."""
    return sorted([*TESTS.glob("*.py"), *(TESTS / "support").glob("*.py")])


def test_no_test_file_imports_another_or_defines_its_own_orch():
    found = {p.relative_to(TESTS).as_posix(): breaches(p) for p in python_files()}
    found["support/cli.py"] = [line for line in found["support/cli.py"] if "def orch(" not in line]  # the one runner
    bad = {name: lines for name, lines in found.items() if lines and name not in NOT_YET_MOVED}
    assert not bad, bad
    moved = sorted(name for name in NOT_YET_MOVED if not found.get(name))
    assert not moved, f"take these off NOT_YET_MOVED: {moved}"


def test_orch_is_defined_once_in_the_suite():
    defined = [f"{p.relative_to(TESTS).as_posix()} {line}" for p in python_files() for line in breaches(p)
               if "def orch(" in line]
    assert [entry.split()[0] for entry in defined] == ["support/cli.py"], defined


def test_the_check_sees_a_breach(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("from test_run import snapshot\nimport test_crash\n\n\ndef orch(project, *args):\n    pass\n")
    assert len(breaches(sample)) == 3
    sample.write_text("def helper():\n    def orch(*args):\n        pass\n")  # a closure counts too
    assert len(breaches(sample)) == 1
    sample.write_text("from support.cli import orch\nimport sshd\n")
    assert breaches(sample) == []
