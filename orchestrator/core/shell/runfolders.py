"""The run folders of a host's workdir (`orch clean`, recovery): listed with their size and
whether their server lives, and removed by name."""

from __future__ import annotations

import re

from .process import LIVE_GROUP
from .quoting import join, path, quote

RUN_UID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")  # what orch names a run folder


def run_folders(runs_dir: str, log: str) -> str:
    """One line per run folder: disk use in KiB, the log's size (`-` if none), 1 if its server's
    process group still answers (pid recorded, no exit code yet) else 0, then the folder's name."""
    return (
        f"{LIVE_GROUP}cd {path(runs_dir)} 2>/dev/null || exit 0; for d in */; do d=${{d%/}}; [ -d \"$d\" ] || continue; "
        f"k=$(du -sk -- \"$d\" | cut -f1); l=$(stat -c %s -- \"$d\"/{quote(log)} 2>/dev/null || echo -); a=0; "
        "if [ -f \"$d/pid\" ] && [ ! -f \"$d/exit_code\" ] && g=$(cat \"$d/pid\") && (live_group); then a=1; fi; "
        "printf '%s %s %s %s\\n' \"$k\" \"$l\" \"$a\" \"$d\"; done"
    )


def live_run_folders(runs_dir: str) -> str:
    """The name of each run folder of `runs_dir` whose server's process group (its pid file) has a
    live process, one a line; zombies aside."""
    return (
        f"{LIVE_GROUP}cd {path(runs_dir)} 2>/dev/null || exit 0; for d in */; do d=${{d%/}}; "
        "[ -f \"$d/pid\" ] && g=$(cat \"$d/pid\") && [ -n \"$g\" ] && (live_group) && printf '%s\\n' \"$d\"; done; true"
    )


def remove_run_folders(runs_dir: str, uids: list[str]) -> str:
    """Remove the named run folders of `runs_dir`; a name that is not a run uid is refused."""
    for uid in uids:
        if not RUN_UID.fullmatch(uid):
            raise ValueError(f"not a run folder name: {uid!r}")
    return f"cd {path(runs_dir)} && rm -rf -- {join(uids)}"
