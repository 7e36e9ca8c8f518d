"""Logging set-up, environment flags and process helpers shared by the rehearsal server."""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback

DATEFMT = "%Y-%m-%d %H:%M:%S"

# Loggers of code that runs in SGLang's scheduler (rank) processes: their lines carry the rank prefix.
RANK_LOGGERS = (
    "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor",
    "sglang.srt.model_loader",
    "sglang.srt.models",
    "sglang.srt.configs",
    "sglang.srt.mem_cache",
    "sglang.srt.speculative",
)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "y", "on")


def rank_prefix(tp_rank: int, tp_size: int, dp_rank: int | None = None) -> str:
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if tp_size > 1:
        prefix += f" TP{tp_rank}"
    return prefix


def _formatter(prefix: str = "") -> logging.Formatter:
    maybe_ms = ".%(msecs)03d" if env_bool("SGLANG_LOG_MS") else ""
    return logging.Formatter(f"[%(asctime)s{maybe_ms}{prefix}] %(message)s", datefmt=DATEFMT)


def _stdout_handler(formatter: logging.Formatter) -> logging.Handler:
    handler = logging.StreamHandler(sys.stdout)  # flushes after every record
    handler.setFormatter(formatter)
    return handler


def configure_logger(log_level: str, prefix: str) -> None:
    """Main-process lines without a prefix; scheduler-side lines with the rank prefix."""
    level = getattr(logging, log_level.upper(), logging.INFO)
    root = logging.getLogger()
    root.handlers[:] = [_stdout_handler(_formatter())]
    root.setLevel(level)
    for name in RANK_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [_stdout_handler(_formatter(prefix))]
        logger.propagate = False
        logger.setLevel(level)


def rank_logger(prefix: str) -> logging.Logger:
    """A logger for one extra simulated rank (e.g. the rank that fails to start)."""
    logger = logging.getLogger(f"sglang.srt.managers.scheduler.rank[{prefix.strip()}]")
    if not logger.handlers:
        logger.addHandler(_stdout_handler(_formatter(prefix)))
        logger.propagate = False
    return logger


class _UvicornFormatter(logging.Formatter):
    """uvicorn's level prefix: 'INFO:' padded to 9 characters (SGLang drops the colours)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.levelprefix = record.levelname + ":" + " " * (8 - len(record.levelname))
        return super().formatMessage(record)


def configure_uvicorn_loggers(log_level_http: str) -> tuple[logging.Logger, logging.Logger]:
    """uvicorn.error and uvicorn.access with SGLang's rewritten formats (no milliseconds)."""
    formatter = _UvicornFormatter("[%(asctime)s] %(levelprefix)s %(message)s", datefmt=DATEFMT)
    loggers = []
    for name, level in (("uvicorn.error", "info"), ("uvicorn.access", log_level_http)):
        logger = logging.getLogger(name)
        logger.handlers[:] = [_stdout_handler(formatter)]
        logger.propagate = False
        logger.setLevel(getattr(logging, level.upper(), logging.INFO))
        loggers.append(logger)
    return loggers[0], loggers[1]


def get_exception_traceback() -> str:
    return "".join(traceback.format_exception(*sys.exc_info()))


def kill_process_tree(include_parent: bool = True) -> None:
    """What SGLang does after a child fails: kill everything, itself with SIGKILL."""
    sys.stdout.flush()
    sys.stderr.flush()
    if include_parent:
        os.kill(os.getpid(), signal.SIGKILL)


def release() -> tuple[int, ...]:
    """The emulated release as numbers, read from the installed version file (0.4.10.post2 -> (0, 4, 10))."""
    from sglang.version import __version__

    return tuple(int(part) for part in __version__.split(".")[:3])


def release_at_least(version: str) -> bool:
    """Whether the emulated release is `version` or later, for what the release only prints or serves."""
    return release() >= tuple(int(part) for part in version.split("."))


def simulated_failure() -> str:
    """ORCH_REHEARSAL_FAIL: oom | not-enough-memory | nccl | scheduler-exception | scheduler-died."""
    return os.environ.get("ORCH_REHEARSAL_FAIL", "").strip().lower()


def load_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("ORCH_REHEARSAL_LOAD_SECONDS", "0.1")))
    except ValueError:
        return 0.1
