"""One vLLM server over several nodes without Ray (0.33.0: `--nnodes N --node-rank R --master-addr
HOST --master-port PORT`, `--headless` on every node but rank 0), as the rehearsal shows it:
torch.distributed's rendezvous at the master address and a dropped peer, over real TCP.

Rank 0 runs the API server: its HTTP socket is bound first, then its engine's executor (the "DP
group leader", `v1/executor/multiproc_executor.py:167`) listens on the master port and waits for
every other node before the model loads, as `init_process_group` blocks (TCPStore's timeout line
when a node never comes). A headless node runs no API server (`entrypoints/cli/serve.py:181`
`run_headless`): it says `Launching vLLM (v...) headless multiproc executor, with head node
address HOST:PORT for torch.distributed process group.` (`serve.py:224`), connects (retrying while
rank 0 is not listening yet), loads its own ranks and waits. Each side watches the other's socket:
a peer that goes away is NCCL's remote error in a worker, whose death the executor's monitor logs
(`Worker proc ... died unexpectedly`, `multiproc_executor.py:380`); the process exits 1 after a
short pause (the watchdog's notice).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

CONNECT_RETRY_SECONDS = 0.1
NOTICE_SECONDS = 1.0  # a peer's loss is seen this long after it happened
JOIN_TIMEOUT_SECONDS = 600.0  # torch.distributed's default store timeout
NCCL_REMOTE = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
    "remote process exited or there was a network error, NCCL version 2.27.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "Last error:\n"
    "socketProgress: Connection closed by remote peer {peer}"
)


def local_world(args) -> int:
    """The ranks one node runs: the world (tp x pp) split over the nodes."""
    return max(1, args.tensor_parallel_size * args.pipeline_parallel_size // max(1, _nnodes(args)))


def _nnodes(args) -> int:
    return int(getattr(args, "nnodes", 1) or 1)  # 0.10.1.1 has no --nnodes


def join(args, log) -> None:
    """Rank 0's executor: block until every other node is in, then watch them (nothing with one node)."""
    if _nnodes(args) <= 1:
        return
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    log("multiproc_executor.py:167", f"DP group leader: node_rank={args.node_rank}, node_rank_within_dp={args.node_rank}, "
        f"master_addr={args.master_addr}, mq_connect_ip={args.master_addr} (local), world_size={world}, "
        f"local_world_size={local_world(args)}", process="EngineCore")
    for sock, peer in _rendezvous(args, log):
        threading.Thread(target=_watch, args=(sock, peer, log, "EngineCore"), daemon=True).start()
    log("multiproc_executor.py:167", f"All {_nnodes(args)} nodes joined the torch.distributed process group at "
        f"{args.master_addr}:{args.master_port}", process="EngineCore")


def headless(args, log, build) -> int:
    """A node of rank > 0: no API server; its ranks loaded (`build`) once it has joined rank 0."""
    from vllm._version import __version__

    if _nnodes(args) <= 1 or args.node_rank == 0:
        log("serve.py:181", "ValueError: the rehearsal runs --headless only as a node of rank > 0 with --nnodes > 1 "
            "(multi-node data parallel is not emulated)", "ERROR", process="")
        return 1
    address = f"{args.master_addr}:{args.master_port}"
    log("serve.py:224", f"Launching vLLM (v{__version__}) headless multiproc executor, with head node address "
        f"{address} for torch.distributed process group.", process="")
    sock = _connect(args, log)
    build()
    threading.Thread(target=_watch, args=(sock, address, log, ""), daemon=True).start()
    log("multiproc_executor.py:167", f"Node rank {args.node_rank} of {_nnodes(args)}: {local_world(args)} worker(s) "
        "loaded; no API server on this node", process="")
    while True:  # its signal ends it (the default SIGTERM), or a peer's loss (`_watch`)
        time.sleep(3600)


def _rendezvous(args, log) -> list[tuple[socket.socket, str]]:
    listener = socket.create_server(("0.0.0.0", args.master_port), reuse_port=False)
    listener.settimeout(JOIN_TIMEOUT_SECONDS)
    peers = []
    try:
        while len(peers) < _nnodes(args) - 1:
            sock, (address, port) = listener.accept()
            rank = sock.recv(64).decode(errors="replace").strip()
            log("multiproc_executor.py:167", f"node rank {rank} joined from {address}", process="EngineCore")
            peers.append((sock, f"{address}<{port}>"))
    except socket.timeout:
        _fail(log, "EngineCore", f"torch.distributed.DistStoreError: Timed out after {JOIN_TIMEOUT_SECONDS:.0f} seconds "
              f"waiting for clients. {len(peers) + 1}/{_nnodes(args)} clients joined.")
    finally:
        listener.close()
    return peers


def _connect(args, log) -> socket.socket:
    deadline = time.monotonic() + JOIN_TIMEOUT_SECONDS
    while True:
        try:
            sock = socket.create_connection((args.master_addr, args.master_port), timeout=5)
            break
        except OSError as exc:
            if time.monotonic() >= deadline:
                _fail(log, "", "torch.distributed.DistNetworkError: The client socket has timed out after "
                      f"{JOIN_TIMEOUT_SECONDS:.0f}s while trying to connect to ({args.master_addr}, {args.master_port}): {exc}")
            time.sleep(CONNECT_RETRY_SECONDS)
    sock.settimeout(None)
    sock.sendall(f"{args.node_rank}\n".encode())
    return sock


def _watch(sock: socket.socket, peer: str, log, process: str) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass
    time.sleep(NOTICE_SECONDS)
    log("multiproc_executor.py:1189", "WorkerProc hit an exception.\n" + NCCL_REMOTE.format(peer=peer), "ERROR",
        process="Worker")
    _fail(log, process, "Worker proc VllmWorker-0 died unexpectedly (exit code: 1), shutting down executor.",
          where="multiproc_executor.py:380")


def _fail(log, process: str, message: str, where: str = "multiproc_executor.py:167") -> None:
    log(where, message, "ERROR", process=process)
    sys.stdout.flush()
    os._exit(1)
