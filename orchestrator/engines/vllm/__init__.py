"""vLLM as orch's second engine: pure parsers (logs, metrics, flags, source facts, diagnosis,
preflight), the workload client, log import and `VllmEngine` (its rehearsal stand-in lives in
`orchestrator.rehearsal`).

Formats are those of the real releases read for this package: vLLM 0.10.1.1 (V1 engine, EAGLE-3
through `--speculative-config`) and 0.33.0; each module cites the file:line it follows.
"""

PACKAGE = "vllm"
VERSION_FILES = ("_version.py", "version.py")  # `_version.py` is written at build time (setuptools-scm)
