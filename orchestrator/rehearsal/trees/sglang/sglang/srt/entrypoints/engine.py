"""Start the scheduler ranks and the tokenizer manager, as SGLang's Engine does.

SGLang runs each rank as a child process that signals its parent with SIGQUIT when it fails;
the rehearsal runs them in-process and keeps the same signal, log lines and exit behaviour.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.managers.tokenizer_manager import TokenizerManager, install_launch_phase_sigquit_handler
from sglang.srt import rehearsal_nodes
from sglang.srt.utils import load_seconds, release_at_least, simulated_failure

logger = logging.getLogger(__name__)


def _launch_subprocesses(server_args):
    """Returns (tokenizer_manager, scheduler_info)."""
    if release_at_least("0.5.23"):  # a dict of the resolved values (`_server_args_for_logging`)
        logger.info(f"server_args={dataclasses.asdict(server_args)}")
    else:  # the dataclass's repr
        logger.info(f"{server_args=}")
    install_launch_phase_sigquit_handler()
    if simulated_failure() == "scheduler-died":
        time.sleep(load_seconds())
        logger.error(
            "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common "
            "cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
        )
        raise RuntimeError("Initialization failed. Please see the error messages above.")
    rehearsal_nodes.join(server_args)  # with --nnodes > 1: every node in before anything loads
    world_size = server_args.tp_size * server_args.pp_size * server_args.dp_size
    dp_rank = 0 if server_args.dp_size > 1 else None
    per_node = max(1, world_size // max(1, server_args.nnodes))
    first = server_args.node_rank * per_node
    # the other ranks first: a rank that cannot start fails at once, before rank 0 finishes loading
    for tp_rank in range(max(1, first), first + per_node):
        run_scheduler_process(server_args, tp_rank, dp_rank)
    if server_args.node_rank > 0:  # rank 0 of the whole server lives on node 0
        return None, None
    scheduler = run_scheduler_process(server_args, 0, dp_rank)
    tokenizer_manager = TokenizerManager(server_args, scheduler)
    scheduler.start()
    scheduler_info = {
        "status": "ready",
        "max_total_num_tokens": scheduler.max_total_num_tokens,
        "max_req_input_len": scheduler.max_req_input_len,
    }
    return tokenizer_manager, scheduler_info
