"""The rehearsal vLLM server: the real command line, start-up checks and failures, log lines,
endpoints (/health, /v1/models, /v1/completions and /v1/chat/completions, whole or streamed as
server-sent events, /metrics) and speculative decoding computed on numpy.

Start-up follows vLLM's order: arguments (argparse, exit 2), the HTTP socket (bound before the
engine, as `setup_server` does), the engine config (speculative config, max model len, parallel
size), then the engine core (target, draft loading, EAGLE-3 interface). A failure is a Python
traceback with vLLM's own message, exit 1.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from vllm._rehearsal import lines, nodes, weights
from vllm._rehearsal.engine import Engine, Stats
from vllm._rehearsal.target import Target
from vllm._version import __version__
from vllm.entrypoints.openai.cli_args import FlexibleArgumentParser, make_arg_parser
from vllm.model_executor.models.interfaces import supports_eagle3


def log(where: str, message: str, level: str = "INFO", process: str = "APIServer") -> None:
    """vLLM's format: `(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message` (no prefix for a
    process vLLM gives no name: a headless node's own)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    prefix = f"({process} pid={os.getpid()}) " if process else ""
    for text in message.split("\n"):
        print(f"{prefix}{level} {stamp} [{where}] {text}", flush=True)


def uvicorn(message: str) -> None:
    print(f"(APIServer pid={os.getpid()}) INFO:     {message}", flush=True)


def main(argv: list[str], prog: str) -> int:
    parser = make_arg_parser(FlexibleArgumentParser(prog=prog, description="vLLM OpenAI-Compatible RESTful API server."))
    args = parser.parse_args(argv)
    if args.model_tag:
        args.model = args.model_tag
    if args.headless:  # a node of rank > 0 of a server over several nodes: no API server, none of its lines (`nodes.py`)
        return nodes.headless(args, log, lambda: _or_exit(build_engine, args))
    log(lines.VERSION_WHERE, lines.VERSION_LINE % __version__)
    defaults = vars(parser.parse_args([]))
    log(lines.ARGS_WHERE, f"non-default args: {({k: v for k, v in vars(args).items() if v != defaults.get(k) and k != 'model_tag'})}")
    try:
        sock = bind(args.host or "0.0.0.0", args.port)
        engine = build_engine(args)
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        return 1
    return serve(sock, args, engine)


def _or_exit(build, args) -> Engine:
    try:
        return build(args)
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def build_engine(args) -> Engine:
    target_config = read_config(Path(args.model))
    text = target_config.get("text_config") or target_config
    arch = target_config["architectures"][0]
    registry = importlib.import_module("vllm.model_executor.models.registry")
    models = {**registry._TEXT_GENERATION_MODELS, **registry._MULTIMODAL_MODELS}
    spec = speculative_config(args.speculative_config)
    max_len = int(text.get("max_position_embeddings", 2048))
    if args.max_model_len is not None and args.max_model_len > max_len and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        raise ValueError(
            f"User-specified max_model_len ({args.max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={max_len} or model_max_length=None in model's config.json). This may lead "
            "to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    built_len = built_max_model_len(args.max_model_len, max_len)
    world = nodes.local_world(args)  # this node's share of tp x pp
    gpus = int(os.environ.get("ORCH_REHEARSAL_GPUS", "8"))
    if world > gpus:
        raise ValueError(lines.too_many_gpus(world, gpus))
    if arch not in models:
        raise ValueError(f"Model architectures {[arch]} are not supported for now. Supported architectures: "
                         f"{sorted(models)}")
    module, cls = models[arch]
    target_model = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)()
    if not args.headless:
        nodes.join(args, log)  # rank 0 over several nodes: every node in before the model loads
    target = Target(text)
    draft, method, k = None, None, 0
    if spec is not None:
        method, k = spec["method"], int(spec["num_speculative_tokens"])
        speculative_module().verify_eagle3_target(method, str(text.get("model_type", "")))
        log("core.py:75", "Initializing a V1 LLM engine (v%s) with config: %s"
            % (__version__, config_line(args, spec, built_len)), process=lines.ENGINE_PROCESS)
        try:
            draft = load_draft(spec, registry._SPECULATIVE_DECODING_MODELS)
            if method == "eagle3" and not supports_eagle3(target_model):
                raise RuntimeError("Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested")
        except Exception:
            log("core.py:708", "EngineCore failed to start.", "ERROR", lines.ENGINE_PROCESS)
            for text_line in traceback.format_exc().rstrip().split("\n"):
                log("core.py:708", text_line, "ERROR", lines.ENGINE_PROCESS)
            raise RuntimeError("Engine core initialization failed. See root cause above. "
                               f"Failed core proc(s): {{'{lines.ENGINE_PROCESS}': 1}}") from None
    layers = target_model.get_eagle3_aux_hidden_state_layers(target.num_layers) if draft is not None and draft.uses_fc else ()
    served = (args.served_model_name or [args.model])[0]
    return Engine(target, draft, k, layers, served, Stats(k), built_len)


def built_max_model_len(asked: int | None, derived: int) -> int:
    """The length the engine runs: the target config's when none is asked, and on a release that
    auto-fits, for -1 too (0.33.0 config/model.py:2642, 0.32.0 config/model.py:2624; the
    rehearsal's memory fits any length, so it stays the derived one)."""
    if asked is None or (asked == -1 and lines.AUTO_FIT_MAX_MODEL_LEN):
        return derived
    return asked


def config_line(args, spec: dict, max_model_len: int) -> str:
    """VllmConfig.__str__'s head, in its order (0.32.0 config/vllm.py:2703): the values as built."""
    return (f"model={args.model!r}, speculative_config=SpeculativeConfig(method={spec['method']!r}, "
            f"model={spec.get('model')!r}, num_spec_tokens={int(spec['num_speculative_tokens'])}), "
            f"tokenizer={args.model!r}, skip_tokenizer_init=False, dtype=torch.bfloat16, "
            f"max_seq_len={max_model_len}, tensor_parallel_size={args.tensor_parallel_size}, "
            f"enforce_eager={bool(getattr(args, 'enforce_eager', False))}, "
            f"enable_prefix_caching={args.enable_prefix_caching is not False}, "
            f"{lines.CHUNKED_PREFILL_FIELD}={built_chunked_prefill(args.enable_chunked_prefill)}")


def built_chunked_prefill(asked: bool | None) -> bool:
    """Chunked prefill as the engine runs it: on when not asked; 0.10.1.1's V1 turns it on whatever
    was asked (`lines.CHUNKED_PREFILL_FORCED`)."""
    return True if asked is None or lines.CHUNKED_PREFILL_FORCED else asked


def read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise OSError(f"Can't load the configuration of '{folder}'. Make sure '{folder}' is the correct path to a "
                      "directory containing a config.json file") from None


def speculative_module():
    try:
        return importlib.import_module("vllm.config.speculative")
    except ImportError:
        return importlib.import_module("vllm.config")


def speculative_config(config: dict | None) -> dict | None:
    """SpeculativeConfig's validation: known keys, a method of the Literal."""
    if config is None:
        return None
    module = speculative_module()
    known = set(module.SpeculativeConfig.__dataclass_fields__)
    for key in config:
        if key not in known:
            raise TypeError(f"SpeculativeConfig.__init__() got an unexpected keyword argument '{key}'")
    methods = _literal(module.SpeculativeMethod)
    method = config.get("method")
    if method is None and config.get("model"):  # SpeculativeConfig.__post_init__ infers it from the draft's path
        method = module.SpeculativeConfig(**config).method
        config = {**config, "method": method}
    if method not in methods:
        choices = ", ".join(repr(m) for m in methods[:-1]) + f" or {methods[-1]!r}"
        raise ValueError(f"1 validation error for SpeculativeConfig\nmethod\n  Input should be {choices} "
                         f"[type=literal_error, input_value={method!r}, input_type={type(method).__name__}]")
    if not config.get("num_speculative_tokens"):
        raise ValueError("num_speculative_tokens must be provided with speculative model unless the draft model "
                         "config contains an n_predict parameter.")
    return config


def _literal(alias) -> list[str]:
    out = []
    for arg in getattr(alias, "__args__", ()):
        out += _literal(arg) if hasattr(arg, "__args__") else [arg]
    return out


def load_draft(spec: dict, drafts: dict):
    folder = Path(spec["model"])
    config = read_config(folder)
    archs = config.get("architectures", [])
    if spec["method"] == "eagle":  # transformers_utils/configs/eagle.py: LlamaForCausalLM -> EagleLlamaForCausalLM
        archs = [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    else:
        archs = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]
    if not archs or archs[0] not in drafts:
        raise ValueError(f"Model architectures {archs} are not supported for now. Supported architectures: "
                         f"{sorted(drafts)}")
    module, cls = drafts[archs[0]]
    model = getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)(config)
    return model.load_weights(weights.read(folder))


def serve(sock: socket.socket, args, engine: Engine) -> int:
    host, port = sock.getsockname()[:2]
    log(lines.START_WHERE, lines.start_line(args.host or "0.0.0.0", args.port))
    log(lines.ROUTES_WHERE, "Available routes are:")
    for path, methods in (("/health", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"), ("/v1/completions", "POST"),
                          ("/v1/chat/completions", "POST")):
        log(lines.ROUTE_WHERE, f"Route: {path}, Methods: {methods}")
    server = ThreadingHTTPServer((host, port), Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.request_queue_size = 2048
    sock.listen(2048)
    server.engine = engine  # type: ignore[attr-defined]
    server.access_log = not args.disable_uvicorn_access_log  # type: ignore[attr-defined]
    def shutdown(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)  # before the ready line: a stop right after it shuts down cleanly
    signal.signal(signal.SIGINT, shutdown)
    uvicorn(f"Started server process [{os.getpid()}]")
    uvicorn("Waiting for application startup.")
    uvicorn("Application startup complete.")
    threading.Thread(target=engine.log_loop, args=(log,), daemon=True).start()
    server.serve_forever(poll_interval=0.05)
    uvicorn("Shutting down")
    uvicorn("Finished server process [%d]" % os.getpid())
    return 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # uvicorn's access log line
        if self.server.access_log:  # type: ignore[attr-defined]
            uvicorn(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1] if len(args) > 1 else ""} OK')

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        engine: Engine = self.server.engine  # type: ignore[attr-defined]
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/metrics":
            self._send(200, engine.prometheus().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": engine.served, "object": "model", "owned_by": "vllm", "root": engine.served,
                 "max_model_len": engine.max_model_len}]}).encode())
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self):
        engine: Engine = self.server.engine  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send(404, b'{"detail":"Not Found"}')
        chat = self.path == "/v1/chat/completions"
        try:
            request = json.loads(body or b"{}")
            if request.get("stream"):
                events = engine.stream(request, chat)
                first = next(events)  # a bad request fails before the 200
            else:
                answer = engine.complete(request, chat)
        except (ValueError, KeyError, TypeError) as exc:
            return self._send(400, json.dumps({"object": "error", "message": str(exc), "type": "BadRequestError",
                                               "param": None, "code": 400}).encode())
        if not request.get("stream"):
            return self._send(200, json.dumps(answer).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in itertools.chain([first], events):
            data = event.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

