"""A patch never leaves a Python file that no longer compiles: the patched text is compiled by the
host's Python before anything changes, in `orch run`, `orch run --dry-run` and `orch check`, on the
real `llama_eagle3.py` of published wheels (installed --no-deps, never imported)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from orchestrator.host import patchcheck
from orchestrator.core import patching
from orchestrator.core.inventory import Host
from orchestrator.remote import connect
from orchestrator.core.spec import PatchDef
from support.cli import orch
from support.files import snapshot as tree_hashes
from wheels import package_dir

VERSIONS = ["0.5.9", "0.5.23"]
# each patch check on 0.5.9 is kept out of `make test` (`pytest -m slow` runs it): 0.5.23 stays
CASES = [pytest.param("0.5.9", marks=pytest.mark.slow), "0.5.23"]
ANCHOR = "hidden_states = forward_batch.spec_info.hidden_states"  # in llama_eagle3.py of both releases
# `replace: |-` written the way the file reads, one level in: YAML hands it over without the indent
BLOCK_SCALAR = f"""\
    replace: |-
      {ANCHOR}
      if not getattr(self, "_debug_printed", False):
          self._debug_printed = True
          print("[EAGLE3-DEBUG]", hidden_states.shape, flush=True)
"""
UNCLOSED = f'    replace: "{ANCHOR.replace("= ", "= (")}"\n'  # `(` never closed


def project(tmp_path: Path, python: Path, replace: str) -> Path:
    """An experiment with one `replace` patch on llama_eagle3.py, for a host holding the real wheel."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.sh.j2").write_text("exec {{ host.python | qpath }} -m sglang.launch_server --port {{ port | q }}\n")
    (tmp_path / "experiments").mkdir()
    spec = tmp_path / "experiments" / "e.yaml"
    spec.write_text("name: e\nhosts: [gpu]\ntemplate: ../templates/t.sh.j2\nparams: {port: 1}\npatches:\n"
                    f"  debug:\n    file: sglang:srt/models/llama_eagle3.py\n    find: \"{ANCHOR}\"\n{replace}"
                    "variants:\n  v: {patches: [debug]}\n")
    (tmp_path / "inventory.yaml").write_text(f"hosts:\n  gpu:\n    transport: local\n    workdir: {tmp_path / 'host'}\n"
                                             f"    python: {python}\n    gpus: 1\n")
    return spec


def anchor_line(target: Path) -> int:
    return next(i for i, line in enumerate(target.read_text().splitlines(), 1) if line.strip() == ANCHOR)


@pytest.mark.parametrize("version", CASES)
def test_a_replace_that_breaks_the_syntax_stops_run_dry_run_and_check(version, sglang_python, tmp_path):
    python = sglang_python(version)
    folder = package_dir(python)
    target = folder / "srt" / "models" / "llama_eagle3.py"
    before = tree_hashes(folder)
    spec = project(tmp_path, python, UNCLOSED)
    where = f"gpu:{target}:{anchor_line(target)}: SyntaxError: '(' was never closed"

    dry = orch(tmp_path, "run", str(spec), "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    [line] = dry.stderr.strip().splitlines()
    assert "e.yaml:" in line and "patch 'debug'" in line and where in line and "nothing was changed" in line

    done = orch(tmp_path, "run", str(spec))
    assert done.returncode == 2, done.stdout + done.stderr
    record = json.loads(orch(tmp_path, "show", "last", "--json").stdout)
    assert record["status"] == "failed" and where in record["error"] and record["patches"] == []

    checked = orch(tmp_path, "check", str(spec), "--json")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    [finding] = [f for g in json.loads(checked.stdout) for f in g["findings"] if f["code"] == "patch-does-not-compile"]
    assert finding["severity"] == "error" and where in finding["what"] and "patch 'debug'" in finding["what"]

    assert tree_hashes(folder) == before
    assert not list((tmp_path / "host").glob("journal/*/*")) and not list((tmp_path / "host").glob("runs/*/launch.sh"))


@pytest.mark.parametrize("version", CASES)
def test_a_block_scalar_replace_is_reindented_and_compiles(version, sglang_python, tmp_path):
    python = sglang_python(version)
    folder = package_dir(python)
    target = folder / "srt" / "models" / "llama_eagle3.py"
    before = tree_hashes(folder)
    spec = project(tmp_path, python, BLOCK_SCALAR)

    dry = orch(tmp_path, "run", str(spec), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert '+        if not getattr(self, "_debug_printed", False):' in dry.stdout
    assert '+            print("[EAGLE3-DEBUG]", hidden_states.shape, flush=True)' in dry.stdout
    checked = orch(tmp_path, "check", str(spec), "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [f["code"] for g in json.loads(checked.stdout) for f in g["findings"]] == []
    assert tree_hashes(folder) == before

    import yaml

    loaded = yaml.safe_load(spec.read_text())["patches"]["debug"]
    patched = patching.apply(PatchDef("debug", "x", "e.yaml:1", loaded["find"], "replace", loaded["replace"]),
                             target.read_text(), "gpu")
    compile(patched, str(target), "exec")


def compile_over(host: Host, prepared: list[patchcheck.Prepared]) -> list[patchcheck.Broken]:
    async def go():
        conn = await connect(host)
        try:
            return await patchcheck.broken(conn, host, prepared)
        finally:
            await conn.close()

    return asyncio.run(go())


def test_the_real_file_patched_is_compiled_over_a_real_sshd(sglang_python, sshd_box, no_user_ssh, tmp_path):
    python = sglang_python(VERSIONS[0])
    target = package_dir(python) / "srt" / "models" / "llama_eagle3.py"
    known = tmp_path / "known_hosts"
    known.write_text(sshd_box.known_line())
    host = sshd_box.host(known, tmp_path / "work", python=str(python))
    text = target.read_bytes()
    patch = PatchDef("debug", str(target), "e.yaml:1", ANCHOR, "replace", ANCHOR)
    broken = text.replace(ANCHOR.encode(), ANCHOR.replace("= ", "= (").encode())
    assert compile_over(host, [(patch, str(target), text, text)]) == []
    [found] = compile_over(host, [(patch, str(target), text, broken)])
    assert found.line == anchor_line(target) and found.message == "SyntaxError: '(' was never closed"
    assert not (tmp_path / "work").exists()


def test_stacked_patches_blame_the_one_the_file_stops_compiling_from(tmp_path):
    host = Host(name="here", transport="local", workdir=str(tmp_path), python=sys.executable)
    source = b"def f():\n    return 1\n"
    fine = source.replace(b"return 1", b"x = 1\n    return x")
    broken = source.replace(b"return 1", b"return (1")
    first, second = (PatchDef(n, "/x.py", f"e.yaml:{i}", "return", "replace", "return") for i, n in enumerate("ab", 1))

    def blame(states: list[bytes]) -> list[patchcheck.Broken]:
        return compile_over(host, [(p, "/x.py", source, after) for p, after in zip((first, second), states)])

    assert blame([fine, fine]) == []
    [late] = blame([fine, broken])
    assert late.patch is second and late.line == 2 and late.message == "SyntaxError: '(' was never closed"
    [early] = blame([broken, broken + b"# still broken\n"])
    assert early.patch is first
    assert blame([broken, fine]) == []  # the second patch mended it: the run's file compiles
    assert not list(tmp_path.iterdir())  # compiled in memory: nothing written


def test_check_reports_a_patch_that_does_not_apply(sglang_python, tmp_path):
    python = sglang_python(VERSIONS[0])
    spec = project(tmp_path, python, BLOCK_SCALAR)
    spec.write_text(spec.read_text().replace(f'find: "{ANCHOR}"', 'find: "no such anchor"'))
    checked = orch(tmp_path, "check", str(spec), "--json")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    [finding] = [f for g in json.loads(checked.stdout) for f in g["findings"]]
    assert finding["code"] == "patch-does-not-apply" and finding["severity"] == "error"
    assert "patch 'debug'" in finding["what"] and "occurs 0 times" in finding["what"]
