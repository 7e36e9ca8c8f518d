"""The HTTP server: SGLang's endpoints and JSON, with uvicorn's log lines, on http.server.

Endpoints: /health, /health_generate, /ready, /model_info (+ /get_model_info), /server_info
(+ /get_server_info), /generate (POST/PUT, optional SSE streaming), /flush_cache, /v1/models,
/v1/completions and /v1/chat/completions (both optionally streamed), and /metrics with --enable-metrics.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang.srt.entrypoints.engine import _launch_subprocesses
from sglang.srt.managers.tokenizer_manager import ServerStatus
from sglang.srt.utils import configure_uvicorn_loggers, env_bool, get_exception_traceback, kill_process_tree, release_at_least
from sglang.version import __version__

logger = logging.getLogger(__name__)

FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
STARTUP_FAILURE = 3  # uvicorn's exit code when the server cannot start


@dataclasses.dataclass
class _GlobalState:
    server_args: object = None
    tokenizer_manager: object = None
    scheduler_info: dict = None
    access_logger: logging.Logger = None
    startup_time: float = 0.0


_global_state = _GlobalState()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # uvicorn.access does the logging
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    # --- plumbing ----------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        route = ROUTES.get(path)
        if not release_at_least(NEWER_ROUTES.get(path, "0")):
            route = None
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if route is None:
            return self.send_json(404, {"detail": "Not Found"})
        methods, handler = route
        if method not in methods:
            return self.send_json(405, {"detail": "Method Not Allowed"})
        api_key = _global_state.server_args.api_key
        if api_key and path not in ("/health", "/health_generate", "/ready") and self.headers.get("Authorization") != f"Bearer {api_key}":
            return self.send_json(401, {"error": "Unauthorized"})
        try:
            handler(self, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _access_log(self, status: int) -> None:
        host, port = self.client_address[:2]
        _global_state.access_logger.info(
            f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {status} {HTTPStatus(status).phrase}'
        )

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", content_type)
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def send_json(self, status: int, obj) -> None:
        self.send_body(status, json.dumps(obj).encode(), "application/json")

    def send_text(self, status: int, text: str) -> None:
        self.send_body(status, text.encode(), "text/plain; charset=utf-8")

    def send_stream(self, events) -> None:
        """Server-sent events over chunked transfer encoding."""
        self.send_response_only(200)
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        for chunk in events:
            data = chunk.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def json_body(self, body: bytes) -> dict:
        try:
            obj = json.loads(body or b"{}")
        except ValueError as e:
            raise ValueError(f"Invalid JSON body: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError("The request body must be a JSON object.")
        return obj


# --- endpoints ---------------------------------------------------------------------------


def health_generate(request: Handler, body: bytes) -> None:
    tm = _global_state.tokenizer_manager
    if tm.server_status == ServerStatus.Starting:
        return request.send_body(503, b"", "text/plain")
    path = request.path.split("?", 1)[0]
    if path == "/health" and not env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
        return request.send_body(200, b"", "text/plain")
    timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
    tic = time.time()
    if tm.health_generate(timeout):
        return request.send_body(200, b"", "text/plain")
    logger.error(
        f"Health check failed. Server couldn't get a response from detokenizer for last {timeout:.0f} seconds. "
        f"tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. "
        f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(tm.last_receive_tstamp))}"
    )
    request.send_body(503, b"", "text/plain")


def ready(request: Handler, body: bytes) -> None:
    up = _global_state.tokenizer_manager.server_status == ServerStatus.Up
    request.send_body(200 if up else 503, b"", "text/plain")


def model_info(request: Handler, body: bytes) -> None:
    if request.path.startswith("/get_model_info") and release_at_least("0.5.9"):
        logger.warning("Endpoint '/get_model_info' is deprecated and will be removed in a future version. Please use '/model_info' instead.")
    args = _global_state.server_args
    config = _global_state.tokenizer_manager.model_config
    info = {
        "model_path": args.model_path,
        "tokenizer_path": args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": args.preferred_sampling_params,
    }
    if release_at_least("0.5.9"):  # 0.4.10 answers with the four keys above
        info.update(
            weight_version=args.weight_version,
            has_image_understanding=hasattr(config.hf_config, "vision_config"),
            has_audio_understanding=False,
            model_type=config.model_type,
            architectures=config.architectures,
            served_model_name=args.served_model_name,
            load_format=args.load_format,
            reasoning_parser=args.reasoning_parser,
            tool_call_parser=args.tool_call_parser,
            disaggregation_mode="null",
        )
    request.send_json(200, info)


def server_info(request: Handler, body: bytes) -> None:
    if request.path.startswith("/get_server_info") and release_at_least("0.5.9"):
        logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.")
    args = _global_state.server_args
    scheduler = _global_state.tokenizer_manager.scheduler
    with scheduler.lock:
        internal_state = scheduler.get_internal_state()
    request.send_json(
        200,
        {
            **dataclasses.asdict(args),
            "launch_command": " ".join([sys.executable, "-m", "sglang.launch_server", *sys.argv[1:]]),
            **_global_state.scheduler_info,
            "kv_events": None,
            "startup_time": _global_state.startup_time,
            "internal_states": [internal_state],
            "version": __version__,
            "frontend": "python",
        },
    )


def generate_request(request: Handler, body: bytes) -> None:
    tm = _global_state.tokenizer_manager
    try:
        obj = request.json_body(body)
        if obj.get("stream"):
            events = tm.generate_stream(obj)
            first = next(events)
        else:
            result = tm.generate(obj)
    except ValueError as e:
        return request.send_json(400, {"error": {"message": str(e)}})
    if not obj.get("stream"):
        return request.send_json(200, result)

    def sse():
        yield f"data: {json.dumps(first)}\n\n"
        for out in events:
            yield f"data: {json.dumps(out)}\n\n"
        yield "data: [DONE]\n\n"

    request.send_stream(sse())


def flush_cache(request: Handler, body: bytes) -> None:
    ok = _global_state.tokenizer_manager.scheduler.flush_cache()
    request.send_text(200 if ok else 400, FLUSH_CACHE_TEXT)


def openai_models(request: Handler, body: bytes) -> None:
    args = _global_state.server_args
    request.send_json(
        200,
        {
            "object": "list",
            "data": [
                {
                    "id": args.served_model_name,
                    "object": "model",
                    "created": int(_global_state.startup_time),
                    "owned_by": "sglang",
                    "root": args.served_model_name,
                    "parent": None,
                    "max_model_len": _global_state.tokenizer_manager.context_len,
                }
            ],
        },
    )


def _chat_prompt(messages) -> str:
    """The served model's chat template, as the rehearsal tokenizer has one: each turn after its role."""
    return "".join(f"<|{m.get('role', 'user')}|> {m.get('content', '')} " for m in messages) + "<|assistant|>"


def _openai_generate(request: Handler, body: bytes, chat: bool) -> None:
    tm = _global_state.tokenizer_manager
    try:
        obj = request.json_body(body)
        if chat:
            prompt = _chat_prompt(obj.get("messages") or [])
            max_tokens = obj.get("max_completion_tokens") or obj.get("max_tokens")
        else:
            prompt = obj.get("prompt", "")
            max_tokens = obj.get("max_tokens", 16)
        params = {"max_new_tokens": max_tokens, "temperature": obj.get("temperature", 1.0)}
        params.update({k: obj[k] for k in ("top_p", "top_k") if k in obj})
        inner = {"text": prompt, "sampling_params": params, "stream": bool(obj.get("stream"))}
        if obj.get("stream"):
            events = tm.generate_stream(inner)
            first = next(events)
        else:
            out = tm.generate(inner)
    except ValueError as e:
        return request.send_json(400, {"object": "error", "message": str(e), "type": "BadRequestError", "param": None, "code": 400})
    if obj.get("stream"):
        return request.send_stream(_openai_stream(obj, chat, first, events))
    meta = out["meta_info"]
    finish = meta["finish_reason"]["type"] if meta["finish_reason"] else None
    choice = {"index": 0, "logprobs": None, "finish_reason": finish, "matched_stop": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": out["text"], "reasoning_content": None, "tool_calls": None}
    else:
        choice["text"] = out["text"]
    response = {
        "id": meta["id"],
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": obj.get("model") or _global_state.server_args.served_model_name,
        "choices": [choice],
        "usage": _usage(meta),
    }
    if obj.get("return_spec_tokens_details") and "spec_verify_ct" in meta:
        keys = ("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct")
        response["sglext"] = {"spec_tokens_details": {k: meta[k] for k in keys}}
    request.send_json(200, response)


def _usage(meta: dict) -> dict:
    return {"prompt_tokens": meta["prompt_tokens"], "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
            "completion_tokens": meta["completion_tokens"], "prompt_tokens_details": None}


def _openai_stream(obj: dict, chat: bool, first: dict, events):
    """serving_chat.py / serving_completions.py streams: (chat) a first chunk with the role, a chunk per
    new text delta with finish_reason on the last, usage per chunk with `continuous_usage_stats`, a
    usage-only chunk (`choices: []`) with `include_usage`, then [DONE]."""
    options = obj.get("stream_options") or {}
    model = obj.get("model") or _global_state.server_args.served_model_name
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(meta: dict, choices: list, usage=None) -> str:
        return "data: " + json.dumps({"id": meta["id"], "object": kind, "created": int(time.time()), "model": model,
                                      "choices": choices, "usage": usage}) + "\n\n"

    sent, meta = "", first["meta_info"]
    if chat:
        yield chunk(meta, [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
    for out in itertools.chain([first], events):
        meta = out["meta_info"]
        delta, sent = out["text"][len(sent):], out["text"]
        finish = meta["finish_reason"]["type"] if meta["finish_reason"] else None
        if not delta and finish is None:
            continue
        choice = {"index": 0, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        choice.update({"delta": {"role": None, "content": delta}} if chat else {"text": delta})
        yield chunk(meta, [choice], _usage(meta) if options.get("continuous_usage_stats") else None)
    if options.get("include_usage"):
        yield chunk(meta, [], _usage(meta))
    yield "data: [DONE]\n\n"


def metrics(request: Handler, body: bytes) -> None:
    args = _global_state.server_args
    if not args.enable_metrics:  # SGLang mounts the Prometheus app only with --enable-metrics
        return request.send_json(404, {"detail": "Not Found"})
    scheduler = _global_state.tokenizer_manager.scheduler
    labels = f'engine_type="unified",model_name="{args.served_model_name}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    rows = [
        ("gauge", "sglang:num_running_reqs", len(scheduler.running)),
        ("gauge", "sglang:num_queue_reqs", len(scheduler.waiting_queue)),
        ("gauge", "sglang:gen_throughput", scheduler.last_gen_throughput),
        ("gauge", "sglang:token_usage", scheduler._num_used_tokens() / scheduler.max_total_num_tokens),
        ("counter", "sglang:prompt_tokens_total", scheduler.prompt_tokens_total),
        ("counter", "sglang:generation_tokens_total", scheduler.generation_tokens_total),
        ("counter", "sglang:num_requests_total", scheduler.num_requests_total),
    ]
    if args.speculative_algorithm:
        rows += [
            ("gauge", "sglang:spec_accept_length", scheduler.last_spec_accept_length),
            ("gauge", "sglang:spec_accept_rate", scheduler.last_spec_accept_rate),
            ("gauge", "sglang:spec_num_steps", args.speculative_num_steps),
            ("gauge", "sglang:spec_num_draft_tokens", args.speculative_num_draft_tokens),
        ]
    lines = []
    for kind, name, value in rows:
        lines += [f"# HELP {name} {name.split(':', 1)[1].replace('_', ' ')}.", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"]
    request.send_body(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")


NEWER_ROUTES = {"/model_info": "0.5.9", "/server_info": "0.5.9", "/ready": "0.5.23"}  # first emulated release serving each
ROUTES = {
    "/health": ({"GET"}, health_generate),
    "/health_generate": ({"GET"}, health_generate),
    "/ready": ({"GET"}, ready),
    "/model_info": ({"GET"}, model_info),
    "/get_model_info": ({"GET"}, model_info),
    "/server_info": ({"GET"}, server_info),
    "/get_server_info": ({"GET"}, server_info),
    "/generate": ({"POST", "PUT"}, generate_request),
    "/flush_cache": ({"GET", "POST"}, flush_cache),
    "/v1/models": ({"GET"}, openai_models),
    "/v1/completions": ({"POST"}, lambda r, b: _openai_generate(r, b, chat=False)),
    "/v1/chat/completions": ({"POST"}, lambda r, b: _openai_generate(r, b, chat=True)),
    "/metrics": ({"GET"}, metrics),
}


# --- start-up ------------------------------------------------------------------------------


def _wait_and_warmup(server_args) -> None:
    host = "127.0.0.1" if server_args.host in ("0.0.0.0", "::", "") else server_args.host
    url = f"http://{host}:{server_args.port}"
    tm = _global_state.tokenizer_manager
    for _ in range(1200):
        time.sleep(0.05)
        try:
            urllib.request.urlopen(f"{url}/{'model_info' if release_at_least('0.5.9') else 'get_model_info'}", timeout=5).read()
            break
        except OSError:
            continue
    else:
        logger.error("Initialization failed. warmup error: the server did not answer /model_info")
        kill_process_tree()
    if not server_args.skip_server_warmup:
        payload = {"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        try:
            req = urllib.request.Request(f"{url}/generate", json.dumps(payload).encode(), {"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=600).read()
        except Exception:
            logger.error(f"Initialization failed. warmup error: {get_exception_traceback()}")
            kill_process_tree()
    tm.mark_ready()
    logger.info("The server is fired up and ready to roll!")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048  # uvicorn's backlog; socketserver's 5 drops connections of a burst (retried after 1 s)


def _bind_error_message(host: str, port: int, exc: OSError) -> str:
    # the wording asyncio's create_server uses, which uvicorn logs
    reason = (exc.strerror or os.strerror(exc.errno or 0)).lower()
    return f"[Errno {exc.errno}] error while attempting to bind on address {(host, port)!r}: {reason}"


def launch_server(server_args) -> None:
    """Launch the rehearsal SGLang server: load, serve, warm up, run until a signal."""
    serving: dict = {}

    def on_signal(signum, frame):
        server = serving.get("server")
        if server is None:  # still loading: leave at once
            sys.stdout.flush()
            os._exit(0)
        if not serving.get("stopping"):
            serving["stopping"] = True
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    tokenizer_manager, scheduler_info = _launch_subprocesses(server_args)
    if server_args.node_rank > 0:  # SGLang's other nodes run their ranks only
        from sglang.srt.rehearsal_nodes import serve_nothing

        serve_nothing()
    _global_state.server_args = server_args
    _global_state.tokenizer_manager = tokenizer_manager
    _global_state.scheduler_info = scheduler_info
    _global_state.startup_time = time.time()
    uvicorn_logger, _global_state.access_logger = configure_uvicorn_loggers(server_args.log_level_http)

    threading.Thread(target=_wait_and_warmup, args=(server_args,), name="warmup", daemon=True).start()

    uvicorn_logger.info(f"Started server process [{os.getpid()}]")
    uvicorn_logger.info("Waiting for application startup.")
    uvicorn_logger.info("Application startup complete.")
    family = socket.AF_INET6 if ":" in server_args.host else socket.AF_INET
    _Server.address_family = family
    try:
        server = _Server((server_args.host, server_args.port), Handler)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        uvicorn_logger.error(_bind_error_message(server_args.host, server_args.port, exc))
        uvicorn_logger.info("Waiting for application shutdown.")
        uvicorn_logger.info("Application shutdown complete.")
        sys.stdout.flush()
        os._exit(STARTUP_FAILURE)
    shown_host = f"[{server_args.host}]" if family == socket.AF_INET6 else server_args.host
    uvicorn_logger.info(f"Uvicorn running on http://{shown_host}:{server_args.port} (Press CTRL+C to quit)")
    serving["server"] = server
    server.serve_forever(poll_interval=0.2)
    uvicorn_logger.info("Shutting down")
    uvicorn_logger.info("Waiting for application shutdown.")
    uvicorn_logger.info("Application shutdown complete.")
    uvicorn_logger.info(f"Finished server process [{os.getpid()}]")
    sys.stdout.flush()
    os._exit(0)
