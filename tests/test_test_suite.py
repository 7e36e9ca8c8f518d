"""The test suite's own layering: test files share helpers through tests/support and conftest.py,
never by importing another test file, and run orch through support.cli's one runner."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Files that still import another test file or define their own `orch`; each leaves this list
# once it imports its helpers from tests/support (one listed here that no longer needs it fails).
NOT_YET_MOVED = {"test_import_graph.py"}


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


def test_no_test_file_imports_another_or_defines_its_own_orch():
    found = {p.name: breaches(p) for p in sorted(TESTS.glob("test_*.py"))}
    bad = {name: lines for name, lines in found.items() if lines and name not in NOT_YET_MOVED}
    assert not bad, bad
    moved = sorted(name for name in NOT_YET_MOVED if name in found and not found[name])
    assert not moved, f"take these off NOT_YET_MOVED: {moved}"


def test_the_check_sees_a_breach(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("from test_run import snapshot\nimport test_crash\n\n\ndef orch(project, *args):\n    pass\n")
    assert len(breaches(sample)) == 3
    sample.write_text("from support.cli import orch\nimport sshd\n")
    assert breaches(sample) == []
