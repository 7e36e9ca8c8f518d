"""Two `orch run` at once on one rehearsal host: the second is refused with one line for all its
plans, or with `--wait` waits for the host's lock (one line naming who holds it), gives up after
its TIMEOUT (exit 3), or runs once the first is done."""

from __future__ import annotations

import getpass
import re

from support.cli import orch, records, start_orch, wait_for
from support.specs import three_plans


def test_a_busy_host_is_refused_in_one_line_or_waited_for(project):
    holder = start_orch(project, "run", str(three_plans(project, requests=800)))
    try:
        wait_for(holder, "sending")  # its first run under its workload: the lock is held
        other = three_plans(project, name="other")

        refused = orch(project, "run", str(other))
        said = refused.stdout + refused.stderr
        assert refused.returncode == 3, said
        busy = [line for line in said.splitlines() if "busy" in line]
        # said as it is refused, then its plans in one line below the summary, not one per plan
        assert len(busy) == 2 and "solo refused: busy: " in busy[0] and "3 plan(s) not run" in busy[1], said
        assert "its 3 remaining plan(s) are not run" in " ".join(said.split()), said
        assert f"held by {getpass.getuser()} on controller" in " ".join(said.split()), said

        assert holder.poll() is None  # still running: the wait runs out
        given_up = orch(project, "run", str(other), "--wait", "1")
        said = " ".join((given_up.stdout + given_up.stderr).split())
        assert given_up.returncode == 3, said
        assert said.count("/solo/lock (at most 1 s)") == 1 and "still busy after waiting 1 s" in said, said
        assert [r for r in records(project) if r["experiment"] == "other"] == []

        assert holder.poll() is None
        waited = orch(project, "run", str(other), "--wait")  # alone: the default wait, long enough
        said = " ".join((waited.stdout + waited.stderr).split())
        assert waited.returncode == 0, said
        assert said.count("/solo/lock (at most 3600 s): held by") == 1, said  # one waiting line
        assert f"held by {getpass.getuser()} (`orch run` on" in said, said
        assert re.search(r", run \d{8}-\d{6}-default-\w+, since \d{4}-", said), said  # the run holding it now
        holder.communicate(timeout=120)
        assert holder.returncode == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    runs = records(project)
    assert sorted((r["experiment"], r["status"]) for r in runs) == [("other", "succeeded")] * 3 + [
        ("steps", "succeeded")] * 3
    # the waiting run started only once the holder's last run had ended
    last_held = max(r["ended_at"] for r in runs if r["experiment"] == "steps")
    assert min(r["started_at"] for r in runs if r["experiment"] == "other") >= last_held


def test_a_wait_that_is_not_a_number_is_one_line_exit_2(project):
    done = orch(project, "run", str(three_plans(project)), "--wait", "soon")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--wait" in done.stderr and "Traceback" not in done.stderr, done.stderr
