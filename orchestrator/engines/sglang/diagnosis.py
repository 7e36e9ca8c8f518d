"""Why an SGLang server failed, from its log text: one known signature -> kind, one-line advice, evidence.

`diagnose` reads every line it is given, unwrapped first (`loglines.unwrap`: another logger's
prefix taken off). For big logs, `logs.parse_log*` first cuts the text down to the lines around
`NEEDLES` in the log's last `logs.TAIL_SIZE` bytes and `HEAD_NEEDLES` in its first `HEAD_SIZE`
(plus the traceback that follows a `TRACEBACK_OPENERS` line and the few lines before the lines in
`LINES_BEFORE`) and diagnoses only that; every signature below is found from those lines alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from orchestrator.engines.base import Diagnosis

from .loglines import TRACEBACK, exception_above, is_exception, is_frame, tracebacks, unwrap
from .skipped import IMPORT_ERROR, error_line, patched_file, skipped_modules



# Literals one of which is on every line a signature needs (other than traceback bodies). Each has a
# character that is rare in normal logs, so it can be found fast; "Rank N scheduler is dead." and
# "Health check failed." are reached through the "Exit code:" line after them / the rest of their line,
# "... is not available in N seconds" through the traceback it ends.
NEEDLES: tuple[str, ...] = (
    TRACEBACK, "CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError",
    "Not enough memory", "already in use", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "Scheduler hit an exception", "scheduler died during initialization", "Exit code:",
    "NCCL error", "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError", "ncclRemoteError",
    "ncclInvalidUsage", "NCCL WARN", "set_eagle3_layers_to_capture", "Capture cuda graph failed",
    "Initialization failed", "couldn't get a response from detokenizer", "Received sigquit", "SIGQUIT received",
    "Watchdog caught collective operation timeout", "failure detected by watchdog", "no kernel image is available",
)
# Printed at startup, so looked for in the head of a log only: argparse rejecting a command line
# (before anything else), and the model modules SGLang could not import (as each process starts).
HEAD_NEEDLES: tuple[str, ...] = ("error: unrecognized arguments", "error: ambiguous option", IMPORT_ERROR)
HEAD_SIZE = 16 << 20
TRACEBACK_OPENERS: tuple[str, ...] = (TRACEBACK,)  # the lines after these belong to the evidence
# "Rank N scheduler is dead." precedes "Exit code: C"; a crash's cause may be printed above its header;
# `Exception ignored in: ...` above a traceback marks it as a destructor's at exit (loglines.tracebacks).
LINES_BEFORE: dict[str, int] = {"Exit code:": 3, "Scheduler hit an exception": 20, TRACEBACK: 1}
NAMED_SKIPPED = 3  # skipped model modules listed in a summary
PATCHED_MODULE_IMPORT = "patched-module-import"

_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError")
_OOM_DETAIL = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)(?:\. GPU (\d+))?")
_KV = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
_KV_VALUE = re.compile(r"mem_fraction_static=([\d.]+)")
_BIND = re.compile(r"address already in use", re.IGNORECASE)
_BIND_ADDR = re.compile(r"\('([^']*)', (\d+)\)")
_PORT_WAIT = re.compile(r"(\S+) at (\d+) is not available in (\d+) seconds")
_CTX = re.compile(r"context_length \((\d+)\) is greater than the derived context_length \((\d+)\)")
_AUX = re.compile(r"(?:Model (\S+) )?does not implement set_eagle3_layers_to_capture"
                  r"|'(\w+)' object has no attribute 'set_eagle3_layers_to_capture'")
_GRAPH = re.compile(r"Capture cuda graph failed: ?(.*)")
_NCCL_ERR = re.compile(r"NCCL error|nccl(?:Internal|System|UnhandledCuda|Remote)Error|ncclInvalidUsage")
_ARG_UNKNOWN = re.compile(r"error: unrecognized arguments: (.*)")
_ARG_AMBIG = re.compile(r"error: ambiguous option: (\S+?)(?:=\S*)? could match (.*)")
# torch's ProcessGroupNCCL watchdog: `[Rank 4] Watchdog caught collective operation timeout:
# WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, ..., Timeout(ms)=600000) ran for 600049 milliseconds
# before timing out.` and, from torch 2.6, `[PG ID 2 PG GUID 3 Rank 1]  failure detected by watchdog at
# work sequence id: 40231`.
_WATCHDOG = re.compile(r"(?:\[Rank (\d+)\] )?Watchdog caught collective operation timeout|\[PG ID [^\]]*Rank (\d+)\]"
                       r"\s+failure detected by watchdog")
_WATCHDOG_OP = re.compile(r"OpType=(\w+)")
_WATCHDOG_TIME = re.compile(r"ran for (\d+) milliseconds")
_NO_KERNEL = re.compile(r"no kernel image is available for execution on the device")
_HEALTH = re.compile(r"Health check failed\.?(.*)")
_WARMUP = re.compile(r"Initialization failed\. warmup error")
_DIED = re.compile(r"Rank (\d+) scheduler died during initialization \(exit code: (-?\d+)\)")
_DEAD = re.compile(r"Rank (\d+) scheduler is dead")
_EXIT = re.compile(r"Exit code: (-?\d+)")
_SCHED = "Scheduler hit an exception"
_CHILD = re.compile(r"Received sigquit from a child process|SIGQUIT received|Initialization failed\.")


def diagnose(text: str, patched: Iterable[str] = ()) -> Diagnosis | None:
    """The most specific known failure in `text`, or None when nothing known matches. `patched`:
    the files the run's patches touched (host paths or PACKAGE:path), for naming a patched model
    module SGLang could not import."""
    lines = [unwrap(line).rstrip("\r\n\t ") for line in text.split("\n")]
    for check in _CHECKS:
        found = check(lines)
        if found is not None:
            break
    return _name_skipped(found, lines, tuple(patched))


def _name_skipped(found: Diagnosis | None, lines: list[str], patched: tuple[str, ...]) -> Diagnosis | None:
    """`found` with the model modules SGLang skipped named in it; first, and as the diagnosis, one
    whose file a patch of the run touched. A skipped module alone is no failure: hosts often lack a
    package some model file needs."""
    skipped = skipped_modules(lines)
    touched = [(s, path) for s in skipped if (path := patched_file(s.module, patched))]
    if touched:
        first, path = touched[0]
        at = f", line {error_line(first.error)}" if error_line(first.error) else ""
        then = f" The server then failed: {_one_line(found.evidence[0])[:200]}." if found else ""
        return Diagnosis(
            PATCHED_MODULE_IMPORT, f"The patched file {path}{at} no longer imports ({first.error}): SGLang "
            f"skipped {first.module}, so the model classes it defines are unknown to the server.{then} Fix the "
            "patch (`orch check` compiles patched files) and relaunch.",
            tuple(dict.fromkeys([first.line, *(found.evidence if found else ()), *(s.line for s, _ in touched[1:])])))
    if found is None or not skipped:
        return found
    names = "; ".join(f"{s.module} ({s.error[:120]})" for s in skipped[:NAMED_SKIPPED])
    more = f" and {len(skipped) - NAMED_SKIPPED} more" if len(skipped) > NAMED_SKIPPED else ""
    return replace(found, summary=f"{found.summary} SGLang also skipped modules it could not import: "
                   f"{names}{more}.", evidence=tuple(dict.fromkeys([*found.evidence, *(s.line for s in skipped[:NAMED_SKIPPED])])))


def _first(lines: list[str], pattern: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
    for i, line in enumerate(lines):
        m = pattern.search(line)
        if m:
            return i, m
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _with_context(lines: list[str], main: str) -> tuple[str, ...]:
    """Evidence: the signature line first, then the crash header it sits under, if any."""
    extra = [line for line in lines if _SCHED in line or _WARMUP.search(line)][:1]
    return tuple(dict.fromkeys([main, *extra]))


def _cuda_oom(lines):
    hit = _first(lines, _OOM)
    if not hit:
        return None
    line = lines[hit[0]]
    detail = _OOM_DETAIL.search(line)
    where = f" (tried to allocate {detail.group(1)}" + (f" on GPU {detail.group(2)})" if detail.group(2) else ")") if detail else ""
    graph = any("Capture cuda graph failed" in x or "CUDA graph begin" in x for x in lines)
    during = " while capturing CUDA graphs" if graph else ""
    return Diagnosis("cuda-oom", f"The GPU ran out of memory{during}{where}: lower --mem-fraction-static (e.g. 0.8), "
                     "or --cuda-graph-max-bs / --max-running-requests, or use more GPUs (--tp-size).", _with_context(lines, line))


def _kv_pool(lines):
    hit = _first(lines, _KV)
    if not hit:
        return None
    line = lines[hit[0]]
    value = _KV_VALUE.search(line)
    now = f" (now {value.group(1)})" if value else ""
    return Diagnosis("kv-pool-too-small", f"No GPU memory was left for the KV cache after loading the weights: increase "
                     f"--mem-fraction-static{now}, or use more GPUs (--tp-size).", _with_context(lines, line))


def _context_length(lines):
    hit = _first(lines, re.compile("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"))
    if not hit or "context_length" not in lines[hit[0]]:
        return None
    line = lines[hit[0]]
    m = _CTX.search(line)
    sizes = f" ({m.group(1)} > {m.group(2)})" if m else ""
    return Diagnosis("context-length", f"The target context length is longer than the draft model's{sizes}: set "
                     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the server env, or pass a smaller --context-length.",
                     _with_context(lines, line))


def _port(lines):
    hit = _first(lines, _BIND)
    if hit:
        line = lines[hit[0]]
        addr = _BIND_ADDR.search(line)
        port = f"{addr.group(2)} on {addr.group(1)}" if addr else "(see evidence)"
        fix = f"ss -ltnp 'sport = :{addr.group(2)}'" if addr else "ss -ltnp"
        return Diagnosis("port-in-use", f"The HTTP port {port} is already in use: stop whatever holds it ({fix}) "
                         "or choose another --port.", (line,))
    hit = _first(lines, _PORT_WAIT)
    if hit:
        i, m = hit
        return Diagnosis("port-in-use", f"Internal port {m.group(2)} ({m.group(1)}) stayed busy for {m.group(3)} s: "
                         "another SGLang server is probably still running on this host; stop it or choose another "
                         "--port (internal ports follow it).", _with_context(lines, lines[i]))
    return None


def _aux_capture(lines):
    hit = _first(lines, _AUX)
    if not hit:
        return None
    model = hit[1].group(1) or hit[1].group(2) or "the target model class"
    return Diagnosis("missing-aux-capture", f"{model} does not implement set_eagle3_layers_to_capture, so EAGLE-3 cannot "
                     "capture aux hidden states: use an SGLang version whose model file has it, or patch it in.",
                     _with_context(lines, lines[hit[0]]))


def _graph_capture(lines):
    hit = _first(lines, _GRAPH)
    if not hit:
        return None
    cause = _one_line(hit[1].group(1))[:200]
    because = f" ({cause})" if cause else ""
    return Diagnosis("cuda-graph-capture", f"CUDA graph capture failed{because}: lower --mem-fraction-static (e.g. 0.8) "
                     "or --cuda-graph-max-bs, or run with --disable-cuda-graph to confirm.", _with_context(lines, lines[hit[0]]))


def _is_source(lines: list[str], i: int) -> bool:
    """lines[i] is the source line a traceback prints under a frame (`raise RuntimeError(f"NCCL ...")`)."""
    return i > 0 and is_frame(lines[i - 1]) and not is_exception(lines[i].strip())


def _error_lines(lines: list[str], pattern: re.Pattern[str]) -> list[str]:
    """The lines `pattern` finds, the exceptions first (`RuntimeError: NCCL error: ...`, the engine's
    own words), source lines of a traceback left out."""
    hits = [line for i, line in enumerate(lines) if pattern.search(line) and not _is_source(lines, i)]
    return sorted(hits, key=lambda line: not is_exception(line.strip()))


def _no_kernel_image(lines):
    hits = _error_lines(lines, _NO_KERNEL)
    if not hits:
        return None
    return Diagnosis("cuda-arch-unsupported", "A CUDA kernel of this install has no code for this GPU's architecture (no "
                     "kernel image for its compute capability): install torch, sgl-kernel and flashinfer builds made "
                     "for this GPU (e.g. sm_75 for a T4), or run on a GPU the build supports.",
                     _with_context(lines, hits[0].strip()))


def _nccl_timeout(lines):
    hit = _first(lines, _WATCHDOG)
    if not hit:
        return None
    i, m = hit
    text = " ".join(lines[i:i + 2])  # a posted line is often wrapped just before `Timeout(ms)=...`
    op, ran = _WATCHDOG_OP.search(text), _WATCHDOG_TIME.search(text)
    what = f"a {op.group(1)} collective" if op else "a collective"
    after = f" after {int(ran.group(1)) // 1000} s" if ran else ""
    rank = m.group(1) or m.group(2)
    on = f" on rank {rank}" if rank else ""
    # torch's own line, where a dump printed without a newline (`Extension modules: ...`) runs into it
    own = lines[i][max(0, lines[i].rfind("[rank", 0, m.start())):]
    return Diagnosis("nccl-timeout", f"NCCL's watchdog stopped {what}{on} that waited{after}: another rank or node "
                     "stopped taking part (crashed, hung, or lost its network): read the other nodes' logs (`orch logs "
                     "RUN --node N`) for the first error there; raise --dist-timeout only if a step is really that slow.",
                     (own.strip(),))


def _nccl_error(lines):
    hits = _error_lines(lines, _NCCL_ERR)
    if not hits:
        return None
    return Diagnosis("nccl", "NCCL (GPU-to-GPU communication) failed: rerun with NCCL_DEBUG=INFO, check that no other "
                     "job holds these GPUs and that the interconnect/driver is healthy.",
                     tuple(dict.fromkeys(hits[:3] + [x for x in lines if "NCCL WARN" in x][:2])))


def _bad_flag(lines):
    hit = _first(lines, _ARG_UNKNOWN)
    if hit:
        flags = hit[1].group(1).strip()
        return Diagnosis("unknown-flag", f"This SGLang version does not know {flags}: remove it or use the flag name "
                         "this version has (orch check shows the host's flag set).", (lines[hit[0]],))
    hit = _first(lines, _ARG_AMBIG)
    if hit:
        return Diagnosis("unknown-flag", f"The abbreviated flag {hit[1].group(1)} is ambiguous here (could match "
                         f"{hit[1].group(2).strip()}): pass the full flag name.", (lines[hit[0]],))
    return None


def _nccl_warn(lines):
    hits = [line for line in lines if "NCCL WARN" in line]
    if not hits:
        return None
    return Diagnosis("nccl", "NCCL printed warnings before the failure: rerun with NCCL_DEBUG=INFO and check the GPUs and "
                     "interconnect named there.", tuple(hits[:3]))


def _health(lines):
    hit = _first(lines, _HEALTH)
    if not hit:
        return None
    return Diagnosis("health-check", "The server stopped answering its health check (no detokenizer output in time): "
                     "the scheduler is stuck or dead; look above for a crash, or raise SGLANG_HEALTH_CHECK_TIMEOUT "
                     "if it is only slow.", (lines[hit[0]],))


def _warmup(lines):
    hit = _first(lines, _WARMUP)
    if not hit:
        return None
    tb = [exc for i, exc in tracebacks(lines) if i >= hit[0] and exc]
    cause = f" ({tb[0]})" if tb else ""
    return Diagnosis("init-failed", f"The server started but its warmup request failed{cause}: fix the error shown, "
                     "then relaunch.", tuple(dict.fromkeys([*tb[:1], lines[hit[0]]])))


def _scheduler_died(lines):
    hit = _first(lines, _DIED)
    if hit:
        rank, code = hit[1].group(1), hit[1].group(2)
        evidence = (lines[hit[0]],)
    else:
        hit = _first(lines, _DEAD)
        if not hit:
            return None
        rank = hit[1].group(1)
        after = _first(lines[hit[0]:], _EXIT)
        code = after[1].group(1) if after else None
        evidence = (lines[hit[0]],) + ((lines[hit[0] + after[0]],) if after else ())
    if code == "-9":
        advice = "-9 (SIGKILL) usually means the OS OOM killer: check `dmesg -T | grep -i oom` and free host RAM"
    else:
        advice = "look at the lines before it for the cause"
    return Diagnosis("scheduler-died", f"Scheduler rank {rank} died during startup (exit code {code}): {advice}.", evidence)


def _scheduler_exception(lines):
    hit = _first(lines, re.compile(re.escape(_SCHED)))
    if not hit:
        return None
    tb = [(i, exc) for i, exc in tracebacks(lines) if i >= hit[0] and exc]
    if tb:
        exc, where = tb[0][1], "the traceback ends at the evidence line"
    else:  # no exception after the header (cut off, or printed elsewhere): the cause printed above it
        exc, where = exception_above(lines, hit[0]), "printed above the crash header"
    if exc is None:
        return Diagnosis("scheduler-exception", "The scheduler crashed: see the traceback after the evidence line.",
                         (lines[hit[0]],))
    return Diagnosis("scheduler-exception", f"The scheduler crashed with {_one_line(exc)[:300]}: fix that error "
                     f"({where}), then relaunch.", (exc, lines[hit[0]]))


def _traceback(lines):
    tb = [(i, exc) for i, exc in tracebacks(lines) if exc]
    if not tb:
        return None
    exc = tb[-1][1]
    return Diagnosis("traceback", f"A Python exception ended the process: {_one_line(exc)[:300]}; fix that error and "
                     "relaunch.", (exc, lines[tb[-1][0]]))


def _child_failed(lines):
    hits = [line for line in lines if _CHILD.search(line)]
    if not hits:
        return None
    return Diagnosis("init-failed", "A server subprocess failed without a recognised error: read the log lines just "
                     "before the evidence for the cause.", tuple(hits[:2]))


# Most specific first: a CUDA OOM inside a scheduler traceback is reported as the OOM.
_CHECKS = (
    _cuda_oom, _no_kernel_image, _kv_pool, _context_length, _port, _aux_capture, _graph_capture, _nccl_error,
    _nccl_timeout, _bad_flag,
    _warmup, _scheduler_died, _nccl_warn, _health, _scheduler_exception, _traceback, _child_failed,
)
