"""What orch reads of a host's vLLM (hostside.py) and how it talks to the server (client.py), over
the local transport and a real sshd: the rehearsal vLLM installed as the host python's `vllm`
package, its server a real process, the HTTP through the connection's forward."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import sshd
from conftest import free_port
from orchestrator.core.inventory import Host
from orchestrator.engines.base import Call
from orchestrator.engines.vllm import client, hostside, source
from orchestrator.errors import WorkloadError
from orchestrator.host.session import HostSession
from orchestrator.rehearsal import vllm as rehearsal
from support.processes import launch, speculative_config as spec, stop, wait_ready

TRANSPORTS = ["local", pytest.param("ssh", marks=pytest.mark.skipif(sshd.sshd_missing() is not None,
                                                                    reason=sshd.sshd_missing() or ""))]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The default release assembled, with the demo checkpoints under `ck/`."""
    folder = tmp_path_factory.mktemp("vllm-host")
    rehearsal.assemble(rehearsal.DEFAULT_RELEASE, folder)
    shutil.copy(rehearsal.CHECKPOINT_MAKER, folder / "make_checkpoints.py")
    subprocess.run([sys.executable, str(folder / "make_checkpoints.py"), str(folder / "ck")], check=True,
                   capture_output=True, timeout=120)
    return folder


def python_with(path: Path, folder: Path) -> str:
    """A host python whose import path starts with `path`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={path} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def host_for(transport: str, python: str, tmp_path: Path, request) -> Host:
    if transport == "local":
        return Host("gpu", transport="local", workdir=str(tmp_path / "work"), python=python)
    request.getfixturevalue("no_user_ssh")
    box = request.getfixturevalue("sshd_box")
    known = tmp_path / "known_hosts"
    known.write_text(box.known_line())
    return box.host(known, tmp_path / "work", python=python)


def on_host(host: Host, work):
    async def go():
        session = await HostSession.open(host)
        try:
            return await work(session)
        finally:
            await session.conn.close()
    return asyncio.run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_hostside_reads_the_package_without_importing_it(transport, tree, tmp_path, request):
    host = host_for(transport, python_with(tree, tmp_path / "bin"), tmp_path, request)

    async def work(session):
        where = await hostside.folder(session)
        found = await hostside.flag_set(session)
        sources = await hostside.model_sources(session, ("kimi_k25", "no_such_module"))
        return where, found, sources
    where, found, sources = on_host(host, work)
    assert where == str(tree / "vllm")
    assert found.version == rehearsal.DEFAULT_RELEASE and "--speculative-config" in found.options
    assert "eagle3" in found.methods
    assert {source.REGISTRY, source.DRAFT_LOADER, "config/speculative.py",
            f"{source.MODELS}kimi_k25.py"} <= set(sources)
    assert f"{source.MODELS}no_such_module.py" not in sources
    assert sources[f"{source.MODELS}kimi_k25.py"] == (tree / "vllm" / source.MODELS / "kimi_k25.py").read_text()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_hostside_on_a_host_without_vllm(transport, tmp_path, request):
    host = host_for(transport, python_with(tmp_path / "empty", tmp_path / "bin"), tmp_path, request)

    async def work(session):
        return (await hostside.folder(session), await hostside.flag_set(session),
                await hostside.model_sources(session, ("llama",)))
    assert on_host(host, work) == (None, None, {})


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_client_workload_and_metrics_through_the_connection(transport, tree, tmp_path, request):
    host = host_for(transport, sys.executable, tmp_path, request)
    port = free_port()
    proc, log = launch((rehearsal.DEFAULT_RELEASE, tree), "--model", str(tree / "ck" / "kimi-k25-target"),
                       "--port", str(port), "--speculative-config", spec(tree, "eagle3-draft"))
    try:
        wait_ready(proc, log)

        async def work(session):
            address = await session.conn.forward(port)
            base = f"http://{address[0]}:{address[1]}"
            before = await client.scrape(base)
            done = [await client.complete(base, Call((("user", f"the quick brown fox {i}"),), 32, {"temperature": 0.0}))
                    for i in range(3)]
            turns = (("user", "a fox"), ("assistant", done[0].text), ("user", "and a dog"))
            chat = await client.complete(base, Call(turns, 8, {"temperature": 0.0}, "chat"))
            return await client.served_model(base), before, done + [chat], await client.scrape(base)
        model, before, [*done, chat], after = on_host(host, work)
    finally:
        assert stop(proc) == 0
    assert model == str(tree / "ck" / "kimi-k25-target")  # vLLM serves the model under its path by default
    assert [r.completion_tokens for r in done] == [32, 32, 32] and all(r.prompt_tokens > 0 for r in done)
    assert all(r.ttft is not None and len(r.itl) == 31 and r.text.startswith(" t") for r in done)  # streamed
    assert chat.completion_tokens == 8 and chat.prompt_tokens > 32 and chat.ttft is not None  # the answer in turn 2
    assert before.endpoint == after.endpoint == client.METRICS and after.body["found"] is True
    delta = client.counters(after).minus(client.counters(before))
    assert delta.drafts > 0 and 2.0 < delta.accept_len() < 4.0


class Wrong(BaseHTTPRequestHandler):
    """A server that is no vLLM: no model list (unless `models`), completions without `usage`, no /metrics."""

    models = False

    def do_GET(self):
        if self.models and self.path == client.MODELS:
            self.answer({"data": [{"id": "m"}]})
        else:
            self.send_response(404)
            self.end_headers()

    def do_POST(self):
        self.answer({"choices": [{"text": "x"}]})

    def answer(self, found: dict) -> None:
        body = json.dumps(found).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Unmetered(Wrong):
    models = True


def serving(handler) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_client_says_what_a_wrong_server_lacks():
    (wrong, base), (unmetered, listed) = serving(Wrong), serving(Unmetered)
    try:
        with pytest.raises(WorkloadError, match=r"/v1/models did not name a served model \(HTTP 404\)"):
            asyncio.run(client.served_model(base))
        with pytest.raises(WorkloadError, match="answered without `usage`"):
            asyncio.run(client.complete(listed, Call((("user", "p"),), 4, {})))
        state = asyncio.run(client.scrape(listed))
        assert (state.body, state.endpoint) == (None, client.METRICS)
        assert client.counters(state).found is False
    finally:
        wrong.shutdown()
        unmetered.shutdown()
