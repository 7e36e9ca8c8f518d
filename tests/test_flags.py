"""Flag validation against the real files of published SGLang wheels (installed --no-deps, never
imported), and `orch run` stopping at a bad flag before anything on the host changes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from conftest import ROOT, free_port
from orchestrator.engines.sglang import hostflags
from orchestrator.engines.sglang import flags
from orchestrator.errors import SpecError
from orchestrator.core.inventory import Host
from orchestrator.remote import connect
from support.cli import orch, orch_env
from support.scripts import TEMPLATE, script

# option strings the reference's own scan found (shared/reference/sglang.md section 5); 0.4.10: "about 190"
REFERENCE_COUNTS = {"0.4.10.post2": 190, "0.5.9": 331, "0.5.17": 474, "0.5.23": 547}
# 0.5.9 and 0.5.17 are kept out of `make test` (`pytest -m slow` runs them): the oldest and newest stay
RELEASES = [pytest.param(v, marks=pytest.mark.slow) if v in ("0.5.9", "0.5.17") else v for v in REFERENCE_COUNTS]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))


def flag_set(python: Path) -> flags.FlagSet:
    host = Host(name="wheel-host", transport="local", python=str(python))

    async def scan():
        conn = await connect(host)
        try:
            return await hostflags.flag_set(conn, host, {})
        finally:
            await conn.close()

    return asyncio.run(scan())


@pytest.mark.parametrize("version", RELEASES)
def test_scan_of_real_wheels(sglang_python, version, tmp_path):
    found = flag_set(sglang_python(version))
    assert found.version == version
    assert abs(len(found.options) - REFERENCE_COUNTS[version]) <= 0.05 * REFERENCE_COUNTS[version], len(found.options)
    assert [json.loads(p.read_text())["version"] for p in (tmp_path / "cache" / "flags").iterdir()] == [version]
    assert flag_set(sglang_python(version)) == found  # the second time from the cache
    # every flag the default template renders is known (both entrypoints); only the deprecation warns
    for entrypoint in ("module", "serve"):
        rendered = script(entrypoint=entrypoint)
        assert len(flags.command_flags(rendered)) == 14
        problems = flags.check(rendered, found)
        assert [p.kind for p in problems] == (["deprecated"] if version in ("0.5.17", "0.5.23") else [])
    assert flags.check(script(disable_cuda_graph=False), found) == []
    # a misspelt flag: an error naming the closest valid ones
    [bad] = flags.check(script(disable_cuda_graph=False, extra_args=["--speculative-num-stpes", "3"]), found)
    assert bad.is_error and bad.kind == "unknown" and "--speculative-num-steps" in bad.closest


def test_flag_changes_across_versions(sglang_python):
    old, v9, v17, new = (flag_set(sglang_python(v)) for v in REFERENCE_COUNTS)
    max_bs = script(extra_args=["--cuda-graph-max-bs", "48"])
    assert flags.check(max_bs, v9) == []
    assert [p.kind for p in flags.check(max_bs, v17) if p.flag == "--cuda-graph-max-bs"] == ["deprecated"]
    [removed] = [p for p in flags.check(max_bs, new) if p.flag == "--cuda-graph-max-bs"]
    assert removed.kind == "removed" and removed.is_error
    assert set(removed.closest) == {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"}
    assert "--cuda-graph-max-bs-decode" in removed.message and "prefix" in removed.message
    prefix = script(extra_args=["--speculative-draft", "/d"])
    [ambiguous] = [p for p in flags.check(prefix, new) if p.flag == "--speculative-draft"]
    assert ambiguous.kind == "ambiguous" and len(ambiguous.closest) > 2
    assert [p.kind for p in flags.check(prefix, old) if p.flag == "--speculative-draft"] == ["abbreviated"]
    assert "--speculative-draft-model" in new.options and "--speculative-draft-model" not in old.options
    assert "--model" in new.options and "--tensor-parallel-size" in new.options


def test_error_names_the_template_line_and_the_closest_flags(sglang_python, tmp_path):
    template = tmp_path / "launch.sh.j2"
    # lines that only mention the flag come first: a comment, a Jinja comment, a value
    mentions = '# --prot is misspelt below\n{# --prot, again #}\nexport NOTE="--prot {{ port }}"\n'
    template.write_text(TEMPLATE.read_text().replace("set -euo pipefail\n", "set -euo pipefail\n" + mentions)
                        .replace("  --port {{ port | q }}", "  --prot {{ port | q }}"))
    text = script(template)
    line = next(i for i, t in enumerate(template.read_text().splitlines(), 1) if t.startswith("  --prot"))
    host = Host(name="wheel-host", transport="local", python=str(sglang_python("0.5.23")))
    reports = []

    async def check():
        conn = await connect(host)
        try:
            await hostflags.check_launch(conn, host, {}, text, template, lambda *a: reports.append(a), "v@h")
        finally:
            await conn.close()

    with pytest.raises(SpecError) as caught:
        asyncio.run(check())
    message = str(caught.value)
    assert f"{template}:{line}: SGLang 0.5.23 has no flag --prot" in message and "closest: --port" in message
    assert caught.value.exit_code == 2
    assert any("--disable-cuda-graph is deprecated" in r[1] for r in reports)


def test_command_flags_reads_every_entrypoint():
    for head in ("python3 -m sglang.launch_server", "/v/bin/python -m sglang.cli.main serve", "/v/bin/sglang serve",
                 "sglang serve"):
        text = f"#!/bin/bash\nexport A=1\nexec {head} \\\n  --model-path m \\\n  --tp-size=8 --port 1 # comment --x\n"
        assert flags.command_flags(text) == [("--model-path", 4), ("--tp-size", 5), ("--port", 5)], head
    assert flags.command_flags("echo --not-a-server-flag\n") == []


def test_orch_run_stops_at_a_misspelt_flag_and_changes_nothing(project):
    spec = project / "experiments" / "eagle_debug.yaml"
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    spec.write_text(text.replace("  port: 30000\n", "  port: 30000\n  extra_args: [--speculative-num-stpes, '3']\n"))
    env = {**orch_env(project, columns=None), "ORCH_CACHE": str(project / "cache")}

    def run(*args):
        return orch(project, *args, env=env, timeout=120)

    run("run", str(spec), "--variant", "fixed", "--dry-run", "--set", "port=1")  # installs the rehearsal
    before = {p: p.read_bytes() for p in (project / "host").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    done = run("run", str(spec), "--variant", "fixed", "--set", f"port={free_port()}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has no flag --speculative-num-stpes" in done.stdout and "closest: --speculative-num-steps" in done.stdout
    after = {p: p.read_bytes() for p in (project / "host").rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and "runs" not in p.relative_to(project / "host").parts}
    assert after == before
    assert not list((project / "host").glob("runs/*/launch.sh"))
    checked = run("check", str(spec), "--variant", "fixed", "--json")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    codes = [f["code"] for g in json.loads(checked.stdout) for f in g["findings"]]
    assert "flag-unknown" in codes


def test_boolean_optional_flags_accept_their_no_forms(sglang_python):
    new, v9 = flag_set(sglang_python("0.5.23")), flag_set(sglang_python("0.5.9"))
    negated = sorted(o for o in new.options if o.startswith("--no-"))
    assert len(negated) == 12 and all(o.replace("--no-", "--", 1) in new.options for o in negated)
    assert {"-h", "--help"} <= new.options and {"-h", "--help"} <= v9.options
    both = script(extra_args=["--no-enable-tf32-matmul", "--no-speculative-enable-w4a4-mxfp4-megamoe",
                              "--enable-tf32-matmul"])
    assert [p.kind for p in flags.check(both, new)] == ["deprecated"]  # only --disable-cuda-graph
    # 0.5.9 has no such flag, with or without `no-`
    assert {p.flag: p.kind for p in flags.check(both, v9)}["--no-enable-tf32-matmul"] == "unknown"


def test_scan_adds_no_forms_only_for_boolean_optional_actions():
    fields = (
        "import argparse\n"
        "class F:\n"
        "    tf32: A[Optional[bool], Arg(help='x', action=argparse.BooleanOptionalAction, aliases=['--tf'])] = None\n"
        "    plain: A[bool, 'a store_true flag'] = False\n"
    )
    server_args = ("def add(parser):\n"
                   "    parser.add_argument('--fast', '-f', action=argparse.BooleanOptionalAction)\n"
                   "    parser.add_argument('--slow', action='store_true')\n")
    found = flags.scan({"srt/arg_groups/fields/x.py": fields, "srt/server_args.py": server_args}, "t")
    assert found.options == {"-h", "--help", "--tf32", "--no-tf32", "--tf", "--no-tf", "--plain", "--fast",
                             "--no-fast", "-f", "--slow"}
