"""Several nodes of one server (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`), as the
rehearsal shows them: torch.distributed's rendezvous and a dropped peer, over real TCP.

Rank 0 listens on the dist-init port and waits for every other rank before it loads (real SGLang
blocks in `init_process_group` the same way; it says so with TCPStore's timeout line when a rank
never comes). A rank > 0 connects to it (retrying while rank 0 is not listening yet), loads its own
ranks and serves no HTTP. Each side watches the other's socket: a peer that goes away is what NCCL
reports as a remote error, logged by the scheduler as SGLang logs it, and the process exits after a
short pause (the watchdog's notice), as a real rank does.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time

logger = logging.getLogger("sglang.srt.managers.scheduler")
CONNECT_RETRY_SECONDS = 0.1
NOTICE_SECONDS = 1.0  # a peer's loss is seen by rank 0's watchdog this long after it happened
NCCL_REMOTE = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sglang/srt/managers/scheduler.py", line 2653, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
    "remote process exited or there was a network error, NCCL version 2.27.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "Last error:\n"
    "socketProgress: Connection closed by remote peer {peer}"
)


def _address(server_args) -> tuple[str, int]:
    host, _, port = str(server_args.dist_init_addr or "").rpartition(":")
    if not host or not port.isdigit():
        logger.error(f"--dist-init-addr must be HOST:PORT with --nnodes {server_args.nnodes}, got {server_args.dist_init_addr!r}")
        sys.stdout.flush()
        os._exit(1)
    return host, int(port)


def _timeout(server_args) -> float:
    return float(server_args.dist_timeout or 600)


def join(server_args) -> None:
    """Block until every node is in; then watch the others for the rest of the process's life."""
    if server_args.nnodes <= 1:
        return
    host, port = _address(server_args)
    logger.info(f"Node rank {server_args.node_rank} of {server_args.nnodes}: rendezvous at tcp://{host}:{port}")
    peers = _rendezvous(server_args, port) if server_args.node_rank == 0 else [_connect(server_args, host, port)]
    for sock, name in peers:
        threading.Thread(target=_watch, args=(sock, name), daemon=True).start()
    logger.info(f"All {server_args.nnodes} nodes joined")


def _rendezvous(server_args, port: int) -> list[tuple[socket.socket, str]]:
    listener = socket.create_server(("0.0.0.0", port), reuse_port=False)
    listener.settimeout(_timeout(server_args))
    peers = []
    try:
        while len(peers) < server_args.nnodes - 1:
            sock, (address, peer_port) = listener.accept()
            rank = sock.recv(64).decode(errors="replace").strip()
            logger.info(f"node rank {rank} joined from {address}")
            peers.append((sock, f"{address}<{peer_port}>"))
    except socket.timeout:
        logger.error(f"torch.distributed.DistStoreError: Timed out after {_timeout(server_args):.0f} seconds waiting "
                     f"for clients. {len(peers) + 1}/{server_args.nnodes} clients joined.")
        sys.stdout.flush()
        os._exit(1)
    finally:
        listener.close()
    return peers


def _connect(server_args, host: str, port: int) -> tuple[socket.socket, str]:
    deadline = time.monotonic() + _timeout(server_args)
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            break
        except OSError as exc:
            if time.monotonic() >= deadline:
                logger.error(f"torch.distributed.DistNetworkError: The client socket has timed out after "
                             f"{_timeout(server_args):.0f}s while trying to connect to ({host}, {port}): {exc}")
                sys.stdout.flush()
                os._exit(1)
            time.sleep(CONNECT_RETRY_SECONDS)
    sock.settimeout(None)
    sock.sendall(f"{server_args.node_rank}\n".encode())
    return sock, f"{host}<{port}>"


def _watch(sock: socket.socket, peer: str) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass
    time.sleep(NOTICE_SECONDS)
    logger.error(NCCL_REMOTE.format(peer=peer))
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    sys.stdout.flush()
    os._exit(1)


def serve_nothing() -> None:
    """A node of rank > 0 serves no HTTP: it waits for its signal (or a peer's loss, `_watch`)."""
    logger.info("Node rank > 0: no HTTP server on this node; waiting for the other nodes")
    while True:
        time.sleep(3600)
