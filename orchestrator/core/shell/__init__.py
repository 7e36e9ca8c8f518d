"""Every command string that runs on a host is built here, and every value in it is quoted here.

Callers pass plain values; nothing else in orch joins user values into shell text. One module per
subject, each name re-exported here (`shell.launch`, `shell.lock_take`, ...):

    quoting     quote, path, join; in_bash (the bash every command runs under)
    files       make, move, remove, read, write, list and hash files and folders
    journal     the journal's records, kept originals, sweeping and syncing
    lock        the host lock: take, state, renew, release, break
    process     launch a server detached, its status, its process group and run mark
    runfolders  the run folders of a workdir: listed, live ones, removed
    python      the host's Python: package folders and distributions, compile, remove bytecode
    facts       a host's facts in one round trip
    occupancy   who holds a port, what runs on the GPUs, a free port, free disk
    overlay     a run's own patched copy of a package
    resident    one long-lived bash per SSH channel
    slurm       allocations, steps and the port relay on a Slurm login node
    programs/   the host-side Python programs those commands run, as .py files
"""

from __future__ import annotations

from .facts import FACTS_MARKER, host_facts
from .files import (NO_FILE, cat_files, file_quoting, flag_sources, list_dirs, list_named, log_excerpt, mkdir,
                    mkdir_private, move, read_file, read_range, remove_empty_dir, remove_files, remove_tree,
                    rename_over, sha256_each, sha256_prefix, stat_line, tree_listing, untar_stdin,
                    unwritable_folders, write_stdin, write_stdin_at)
from .journal import cat_records, keep_original, remove_stale_temps, sweep_journal, sync_paths
from .lock import LOCK_MARKER, lock_break, lock_release, lock_renew, lock_state, lock_take
from .occupancy import GPU_MARKER, disk_free, free_port, gpu_use, port_holders
from .overlay import OVERLAY_PAUSES, overlay_packages, unlink_for_copy
from .process import (READY_MARKER, RUN_MARK, SECRETS_FILE, group_alive, group_started_in, kill_pid, launch,
                      run_processes, run_tool, secrets_file, server_status)
from .python import compile_stdin, package_dir, package_distribution, remove_pycache, run_python
from .quoting import DEADLINE_GRACE, in_bash, join, path, quote
from .resident import RESIDENT_GO, RESIDENT_READY, resident_call, resident_setup, resident_shell
from .runfolders import RUN_UID, live_run_folders, remove_run_folders, run_folders
from .slurm import (RELAY_MARK, STEP_CHECK_EVERY, STEP_MARK, STEP_TOKEN, slurm_cancel, slurm_hostnames,
                    slurm_job_state, slurm_node_addrs, slurm_own_jobs, slurm_relay, slurm_step, slurm_submit)

__all__ = [
    # quoting
    "DEADLINE_GRACE", "in_bash", "join", "path", "quote",
    # files
    "NO_FILE", "cat_files", "file_quoting", "flag_sources", "list_dirs", "list_named", "log_excerpt", "mkdir",
    "mkdir_private", "move", "read_file", "read_range", "remove_empty_dir", "remove_files", "remove_tree",
    "rename_over", "sha256_each", "sha256_prefix", "stat_line", "tree_listing", "untar_stdin", "unwritable_folders",
    "write_stdin", "write_stdin_at",
    # journal
    "cat_records", "keep_original", "remove_stale_temps", "sweep_journal", "sync_paths",
    # lock
    "LOCK_MARKER", "lock_break", "lock_release", "lock_renew", "lock_state", "lock_take",
    # process
    "READY_MARKER", "RUN_MARK", "SECRETS_FILE", "group_alive", "group_started_in", "kill_pid", "launch",
    "run_processes", "run_tool", "secrets_file", "server_status",
    # runfolders
    "RUN_UID", "live_run_folders", "remove_run_folders", "run_folders",
    # python
    "compile_stdin", "package_dir", "package_distribution", "remove_pycache", "run_python",
    # facts
    "FACTS_MARKER", "host_facts",
    # occupancy
    "GPU_MARKER", "disk_free", "free_port", "gpu_use", "port_holders",
    # overlay
    "OVERLAY_PAUSES", "overlay_packages", "unlink_for_copy",
    # resident
    "RESIDENT_GO", "RESIDENT_READY", "resident_call", "resident_setup", "resident_shell",
    # slurm
    "RELAY_MARK", "STEP_CHECK_EVERY", "STEP_MARK", "STEP_TOKEN", "slurm_cancel", "slurm_hostnames",
    "slurm_job_state", "slurm_node_addrs", "slurm_own_jobs", "slurm_relay", "slurm_step", "slurm_submit",
]
