"""SGLang's own benchmark tools as a run's workload: `sglang.bench_serving` and
`sglang.bench_one_batch_server`, under the module path the host's release gives them, their
arguments checked against the tool's argparse read from the host's files (as the server's flags
are, `flags.py`), and their result file read into measures.

Where each release keeps them (the wheels' sources):
- bench_serving: `bench_serving.py` up to 0.5.x; 0.5.23 moved it to `benchmark/serving.py` (the
  old module is a shim that imports it). Server address `--host/--port`, result `--output-file`
  (one JSON line per run: durations, throughputs, `*_ttft_ms`/`*_itl_ms`/`*_e2e_latency_ms`/
  `*_tpot_ms` statistics, `accept_length` from the server's `avg_spec_accept_length`).
- bench_one_batch_server: `bench_one_batch_server.py` (0.5.9 keeps its `BenchArgs` in
  `test/bench_one_batch_server_internal.py`); 0.5.23 `benchmark/one_batch_server.py`. Its parser
  holds the server's flags too (`ServerArgs.add_cli_args`). Server `--base-url`, result
  `--result-filename` (one JSON line per batch size x input length x output length; `acc_length`
  from 0.5.x).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.engines.base import HEADLINE, Measure
from orchestrator.errors import SpecError

from . import flags

SERVING, ONE_BATCH = "bench_serving", "bench_one_batch_server"


@dataclass(frozen=True)
class Tool:
    name: str  # as an experiment names it, after `sglang.`
    modules: tuple[tuple[str, str], ...]  # (module, its file under the package folder), newest release's first
    sources: tuple[str, ...]  # other files (globs) that declare its parser's arguments
    address: str  # "host-port" | "base-url": how it is told the server
    result_flag: str  # where it writes its JSON lines
    accept_keys: tuple[str, ...]  # result fields holding the server's accept length


TOOLS = (
    Tool(SERVING, (("sglang.benchmark.serving", "benchmark/serving.py"), ("sglang.bench_serving", "bench_serving.py")),
         (), "host-port", "--output-file", ("accept_length",)),
    Tool(ONE_BATCH, (("sglang.benchmark.one_batch_server", "benchmark/one_batch_server.py"),
                     ("sglang.bench_one_batch_server", "bench_one_batch_server.py")),
         ("test/bench_one_batch_server_internal.py", *flags.SOURCE_FILES), "base-url", "--result-filename",
         ("acc_length",)),
)
OWN_FLAGS = {"host-port": ("--host", "--port", "--base-url"), "base-url": ("--base-url", "--host", "--port")}
RESULT_KEYS = ("batch_size", "input_len", "output_len")  # what tells one_batch_server's result lines apart
THROUGHPUT = "output_throughput"  # shown as orch's `output_tok_s`


def find(name: str) -> Tool:
    """The tool an experiment's `tool:` names: `sglang.bench_serving`, its 0.5.23 path
    `sglang.benchmark.serving`, or the bare name."""
    for tool in TOOLS:
        if name in (tool.name, f"sglang.{tool.name}", *(module for module, _ in tool.modules)):
            return tool
    known = ", ".join(f"sglang.{t.name}" for t in TOOLS)
    raise SpecError(f"workload.tool {name!r}: SGLang has no such benchmark tool; tools: {known}")


def candidates() -> tuple[str, ...]:
    """Every file a tool may live in, for one listing of the host's package folder."""
    return tuple(file for tool in TOOLS for _, file in tool.modules)


def module_of(tool: Tool, present: set[str], version: str) -> tuple[str, str]:
    """(module, file) of the tool in a release whose package folder holds `present` files."""
    for module, file in tool.modules:
        if file in present:
            return module, file
    raise SpecError(f"workload.tool sglang.{tool.name}: SGLang {version} on the host has no such tool (none of "
                    f"{', '.join(f for _, f in tool.modules)} in its package); use a release that ships it")


def argv(tool: Tool, args: Mapping[str, object], port: int, result: str, found: flags.FlagSet,
         module: str) -> tuple[tuple[str, ...], list[str]]:
    """The tool's command-line arguments (the experiment's, then orch's: the server's address and the
    result file) and warnings; a bad argument is a SpecError naming it and the closest ones."""
    words: list[str] = []
    warnings: list[str] = []
    for key, value in args.items():
        flag = key if key.startswith("-") else "--" + key.replace("_", "-")
        if flag in (*OWN_FLAGS[tool.address], tool.result_flag):
            raise SpecError(f"workload.args: {flag} is orch's to set (the run's server, its result file); remove it")
        problem = flags.check_option(flag, found)
        if problem is not None and problem.is_error:
            closest = f"; closest: {', '.join(problem.closest)}" if problem.closest else ""
            what = f"has no argument {flag}" if problem.kind == "unknown" else f"rejects it: {problem.message}"
            raise SpecError(f"workload.args: {module} of SGLang {found.version} {what}{closest}; "
                            f"nothing on the host was changed")
        if problem is not None:
            warnings.append(f"workload.args: {problem.message}")
        words.extend(_words(flag, value))
    if tool.address == "host-port":
        if "--backend" not in words:
            words[:0] = ["--backend", "sglang"]
        words += ["--host", "127.0.0.1", "--port", str(port)]
    else:
        words += ["--base-url", f"http://127.0.0.1:{port}"]
    return (*words, tool.result_flag, result), warnings


def _words(flag: str, value: object) -> list[str]:
    """`flag: true` is the switch alone, `false` leaves it out, a list gives several values (nargs)."""
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [flag, *(str(v) for v in value)]
    return [flag, str(value)]


def measures(tool: Tool, module: str, output: bytes) -> tuple[Measure, ...]:
    """Every number of the result file's lines as a measure named as the tool names it (a line of
    several gets its batch size, input and output length in the name where they differ), the
    server's accept length as the headline and the output throughput as `output_tok_s`."""
    rows = []
    for number, line in enumerate(output.decode(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{module} result line {number}: not JSON ({exc.msg})") from None
            if isinstance(row, dict):
                rows.append(row)
    varying = [k for k in RESULT_KEYS if len({repr(r.get(k)) for r in rows}) > 1]
    found: list[Measure] = []
    for row in rows:
        suffix = "".join(f"@{k}={row.get(k)}" for k in varying)
        accept = next((row[k] for k in tool.accept_keys if _number(row.get(k))), None)
        if accept is not None and not varying:
            found.insert(0, Measure(HEADLINE, float(accept), module, "the server's avg_spec_accept_length after the tool"))
        if _number(row.get(THROUGHPUT)) and not varying:
            found.append(Measure("output_tok_s", float(row[THROUGHPUT]), module, f"the tool's {THROUGHPUT}"))
        found.extend(Measure(name + suffix, float(value), module) for name, value in row.items() if _number(value))
    return tuple(found)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
