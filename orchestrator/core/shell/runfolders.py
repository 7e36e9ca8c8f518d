"""The run folders of a host's workdir (`orch clean`, recovery): listed with their size and
whether their server lives, and removed by name."""

from __future__ import annotations

import re

from .process import LIVE_GROUP, LIVE_GROUPS
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
    live process and whose launch wrapper recorded no exit code, one a line; zombies aside. A folder
    whose server ended costs two file tests (the folders of every past run stay until `orch clean`),
    and /proc is read once for all the others, not once per folder: recovery runs before each
    command's work, so its cost must not grow with the runs a host has seen."""
    return (
        f"cd {path(runs_dir)} 2>/dev/null || exit 0; asked=; for d in */; do d=${{d%/}}; "
        "case \"$d\" in *[!A-Za-z0-9_.:-]*) continue;; esac; "
        "[ -f \"$d/pid\" ] && [ ! -f \"$d/exit_code\" ] || continue; g=; { read -r g < \"$d/pid\"; } 2>/dev/null; "
        "case \"$g\" in ''|*[!0-9]*) continue;; esac; asked=\"$asked $d:$g\"; done; [ -n \"$asked\" ] || exit 0; "
        f"{LIVE_GROUPS}for w in $asked; do case \"$groups\" in *\" ${{w##*:}} \"*) printf '%s\\n' \"${{w%:*}}\";; esac; done; true"
    )


def remove_run_folders(runs_dir: str, uids: list[str]) -> str:
    """Remove the named run folders of `runs_dir`; a name that is not a run uid is refused."""
    for uid in uids:
        if not RUN_UID.fullmatch(uid):
            raise ValueError(f"not a run folder name: {uid!r}")
    return f"cd {path(runs_dir)} && rm -rf -- {join(uids)}"
