"""End to end: the real `orch` command, the rehearsal SGLang as a real process, a real SQLite file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time


from conftest import ROOT, free_port
from support.cli import ORCH, orch
from support.files import sglang_tree, shipped, snapshot


def test_demo_experiment_reproduces_the_story(project, demo, tmp_path):
    done = orch(project, "run", str(demo), "--set", f"port={free_port()}")
    assert done.returncode == 0, done.stdout + done.stderr
    listing = json.loads(orch(project, "ls", "--json").stdout)
    assert [(r["variant"], r["status"]) for r in listing] == [("story", "succeeded"), ("fixed", "succeeded")]
    story = json.loads(orch(project, "show", str(listing[0]["id"]), "--json").stdout)
    fixed = json.loads(orch(project, "show", str(listing[1]["id"]), "--json").stdout)
    assert story["metrics"]["accept_len"] < 1.2 and "draft-rejected" in story["flags"]
    # the preflight said so before anything changed; the story variant allows it to show the result
    [caught] = [f for f in story["preflight"] if f["code"] == "algorithm-not-eagle3"]
    assert caught["severity"] == "error" and caught["allowed"] is True and "EAGLE3" in caught["fix"]
    assert "preflight ERROR (allowed)" in done.stdout
    assert fixed["metrics"]["accept_len"] > 2.0 and fixed["flags"] == []
    width = lambda rec: {d["fields"]["shape"] for d in rec["debug_lines"]}
    (s_shape,), (f_shape,) = width(story), width(fixed)
    s_width = int(s_shape.rstrip("])").split(",")[-1])
    f_width = int(f_shape.rstrip("])").split(",")[-1])
    assert f_width == 3 * s_width, (s_shape, f_shape)  # one layer with EAGLE, three with EAGLE3
    assert all(p["state"] == "reverted" for p in story["patches"] + fixed["patches"])
    # The installed rehearsal SGLang is byte-identical to the shipped one after both runs.
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
    diff = json.loads(orch(project, "diff", "--json").stdout)
    assert diff["params"]["speculative_algorithm"] == {"a": "EAGLE", "b": "EAGLE3"}
    assert "kimi-aux-capture" in json.dumps(diff["patches"])
    assert diff["metrics"]["accept_len"]["delta"] > 0.9
    shape_rows = [k for k in diff["debug_lines"] if k.endswith("shape")]
    assert shape_rows, diff["debug_lines"]
    text = orch(project, "diff").stdout
    assert "accept_len" in text and s_shape in text and f_shape in text and "EAGLE3" in text


def test_bad_anchor_exits_2_and_changes_nothing_on_the_host(project, demo):
    text = demo.read_text().replace(
        'find: "hidden_states = forward_batch.spec_info.hidden_states"', 'find: "no such anchor line"', 1
    )
    assert "no such anchor line" in text
    demo.write_text(text)
    port = free_port()
    orch(project, "run", str(demo), "--variant", "story", "--dry-run", "--set", "port=1")  # installs rehearsal
    before = snapshot(project / "host")
    done = orch(project, "run", str(demo), "--set", f"port={port}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "occurs 0 times" in done.stdout + done.stderr and "Nothing was changed" in done.stdout + done.stderr
    assert snapshot(project / "host") == before


def test_spec_error_exits_2_before_touching_any_host(project, demo):
    demo.write_text(demo.read_text() + "\nbogus_key: 1\n")
    done = orch(project, "run", str(demo))
    assert done.returncode == 2
    assert "eagle_debug.yaml:" in done.stderr and "unknown key 'bogus_key'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (project / "host").exists()


def test_server_crash_is_diagnosed_and_patches_reverted(project, demo, tmp_path):
    done = orch(project, "run", str(demo), "--variant", "story", "--set", f"port={free_port()}",
                "--set", "env.ORCH_REHEARSAL_FAIL=oom", "--set", "disable_cuda_graph=false")  # OOM in graph capture
    assert done.returncode == 1, done.stdout + done.stderr
    [run] = json.loads(orch(project, "ls", "--json").stdout)
    record = json.loads(orch(project, "show", str(run["id"]), "--json").stdout)
    assert record["status"] == "failed"
    assert "exited before it was ready" in record["error"]
    assert record["diagnosis"]["kind"] == "cuda-oom"
    assert all(p["state"] == "reverted" for p in record["patches"])
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
    assert "Scheduler hit an exception" in orch(project, "logs", str(run["id"])).stdout


def test_secrets_never_reach_the_database(project, demo):
    secret = "hf_s3cr3t_value_123"
    done = orch(project, "run", str(demo), "--variant", "story", "--set", f"port={free_port()}",
                "--set", f"env.HF_TOKEN={secret}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert secret.encode() not in (project / "orch.db").read_bytes()
    for extra in ("orch.db-wal",):
        if (project / extra).exists():
            assert secret.encode() not in (project / extra).read_bytes()
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["env"]["HF_TOKEN"] == "<secret:HF_TOKEN>" and secret not in record["command"]


def test_interrupt_reverts_patches_and_marks_the_run(project, demo, tmp_path):
    env = {**os.environ, "ORCH_DB": f"sqlite:///{project / 'orch.db'}", "ORCH_INVENTORY": str(project / "inventory.yaml"),
           "PYTHONPATH": str(ROOT)}
    demo.write_text(demo.read_text().replace("requests: 16", "requests: 400"))
    proc = subprocess.Popen([*ORCH, "run", str(demo), "--variant", "story", "--set", f"port={free_port()}"],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    output = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        output += line
        if "sending" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output + rest
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    assert record["status"] == "interrupted"
    assert all(p["state"] == "reverted" for p in record["patches"])
    assert snapshot(sglang_tree(project)) == shipped(tmp_path)
