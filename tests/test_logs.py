"""SGLang log parsing: every decode/prefill format, debug fields, whole logs, failure diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.engines.sglang.logs import DEFAULT_DEBUG_PATTERN, READY_LINE, DecodeStats, diagnose, extract_debug_lines, parse_decode_line, parse_fields, parse_log, parse_log_bytes, parse_prefill_line

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

# (line, expected fields; fields not named must be None / empty)
DECODE_ROWS = [
    # reference 1.3, real line, sglang ~0.5.3 (header ".", trailing ", ")
    ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, accept len: 1.95, "
     "accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0, ",
     dict(time="2025-10-22 10:27:57", ranks={"TP": 0}, running_req=1, tokens=186, token_usage=0.0, accept_len=1.95,
          accept_rate=0.49, graph=True, gen_throughput=178.86, queue_req=0)),
    # reference 1.3, real PD-decode line (2026)
    ("[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, accept len: 1.67, "
     "accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: "
     "True, gen throughput (token/s): 183.10, #queue-req: 0",
     dict(time="2026-08-14 14:02:47", ranks={"TP": 0}, running_req=3, tokens=266624, token_usage=0.43, accept_len=1.67,
          accept_rate=0.13, graph=True, gen_throughput=183.10, queue_req=0,
          extra={"pre-allocated usage": 0.22, "#prealloc-req": 0, "#transfer-req": 1, "#retracted-req": 0})),
    # reference 1.3, 0.5.23 format, tp=1 and tp>1
    ("[2026-10-30 12:00:06] Decode batch, #running-req: 1, #token: 412, token usage: 0.00, accept len: 3.42, "
     "accept rate: 0.81, cuda graph: True, gen throughput (token/s): 412.37, #queue-req: 0",
     dict(time="2026-10-30 12:00:06", running_req=1, tokens=412, token_usage=0.0, accept_len=3.42, accept_rate=0.81,
          graph=True, gen_throughput=412.37, queue_req=0)),
    ("[2026-10-30 12:00:09 TP0] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, accept len: 2.95, "
     "accept rate: 0.65, cuda graph: True, gen throughput (token/s): 1873.51, #queue-req: 0",
     dict(time="2026-10-30 12:00:09", ranks={"TP": 0}, running_req=8, tokens=5120, token_usage=0.02, accept_len=2.95,
          accept_rate=0.65, graph=True, gen_throughput=1873.51, queue_req=0)),
    # reference 1.3, 0.4.10 style: accept len only, trailing comma
    ("[2025-08-01 10:00:00] Decode batch. #running-req: 1, #token: 250, token usage: 0.01, accept len: 3.21, "
     "cuda graph: True, gen throughput (token/s): 298.10, #queue-req: 0, ",
     dict(time="2025-08-01 10:00:00", running_req=1, tokens=250, token_usage=0.01, accept_len=3.21, graph=True,
          gen_throughput=298.10, queue_req=0)),
    # <=0.4.3.post4: always " TP0", no graph field, largest-len, trailing ", "
    ("[2025-02-01 09:00:00 TP0] Decode batch. #running-req: 2, #token: 900, token usage: 0.05, gen throughput "
     "(token/s): 55.20, largest-len: 0, #queue-req: 1, ",
     dict(time="2025-02-01 09:00:00", ranks={"TP": 0}, running_req=2, tokens=900, token_usage=0.05,
          gen_throughput=55.2, queue_req=1, extra={"largest-len": 0})),
    # 0.4.6.post5: cuda graph, no trailing comma, spec off
    ("[2025-05-01 09:00:00] Decode batch. #running-req: 4, #token: 1200, token usage: 0.10, cuda graph: False, "
     "gen throughput (token/s): 88.00, #queue-req: 3",
     dict(time="2025-05-01 09:00:00", running_req=4, tokens=1200, token_usage=0.10, graph=False, gen_throughput=88.0,
          queue_req=3)),
    # 0.5.4 exact: "[N]" always printed, trailing comma
    ("[2025-11-01 09:00:00 TP0] Decode batch [1240], #running-req: 1, #token: 300, token usage: 0.00, accept len: "
     "2.10, accept rate: 0.70, cuda graph: True, gen throughput (token/s): 150.00, #queue-req: 0, ",
     dict(time="2025-11-01 09:00:00", ranks={"TP": 0}, iteration=1240, running_req=1, tokens=300, token_usage=0.0,
          accept_len=2.10, accept_rate=0.70, graph=True, gen_throughput=150.0, queue_req=0)),
    # 0.5.23 with SGLANG_LOG_FORWARD_ITERS=1 and SGLANG_LOG_MS=1, every rank token, ray actor prefix, \r
    ("(SGLangEngine pid=4242, ip=10.0.0.7) [2026-10-30 12:00:06.123 DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6] Decode batch "
     "[80], #running-req: 5, #token: 640, token usage: 0.01, accept len: 1.00, accept rate: 0.00, npu graph: False, "
     "gen throughput (token/s): 20.50, #queue-req: 2\r",
     dict(time="2026-10-30 12:00:06.123", ranks={"DP": 1, "PP": 2, "ATTN_CP": 3, "MOE_DP": 4, "TP": 5, "EP": 6},
          iteration=80, running_req=5, tokens=640, token_usage=0.01, accept_len=1.0, accept_rate=0.0, graph=False,
          gen_throughput=20.5, queue_req=2)),
    # hybrid SWA, cpu graph, trailing spaces
    ("[2026-10-30 12:00:06 TP0] Decode batch, #running-req: 2, #full token: 1000, full token usage: 0.12, #swa token: "
     "300, swa token usage: 0.40, cpu graph: True, gen throughput (token/s): 33.00, #queue-req: 0   ",
     dict(time="2026-10-30 12:00:06", ranks={"TP": 0}, running_req=2, tokens=1000, token_usage=0.12, graph=True,
          gen_throughput=33.0, queue_req=0, extra={"#swa token": 300, "swa token usage": 0.40})),
    # hybrid SSM, musa graph
    ("[2026-10-30 12:00:06] Decode batch, #running-req: 1, #full token: 77, full token usage: 0.01, mamba num: 4, "
     "mamba usage: 0.03, musa graph: True, gen throughput (token/s): 9.00, #queue-req: 0",
     dict(time="2026-10-30 12:00:06", running_req=1, tokens=77, token_usage=0.01, graph=True, gen_throughput=9.0,
          queue_req=0, extra={"mamba num": 4, "mamba usage": 0.03})),
    # DSpark cap/block accept len, PD host-receive, MFU extras
    ("[2026-10-30 12:00:06 DP0 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, accept len: 4.50, "
     "accept rate: 0.70, cap len: 6.00, block accept len: 3.25, pre-allocated usage: 0.00, #prealloc-req: 0, "
     "#transfer-req: 0, #host-receive-req: 2, #retracted-req: 1, cuda graph: True, gen throughput (token/s): 70.00, "
     "#queue-req: 0, est. decode TFLOPS/s (per GPU): 12.30, est. read BW (GB/s per GPU): 1500.00, "
     "est. write BW (GB/s per GPU): 20.00",
     dict(time="2026-10-30 12:00:06", ranks={"DP": 0, "TP": 0}, running_req=1, tokens=10, token_usage=0.0,
          accept_len=4.5, accept_rate=0.7, graph=True, gen_throughput=70.0, queue_req=0,
          extra={"cap len": 6.0, "block accept len": 3.25, "pre-allocated usage": 0.0, "#prealloc-req": 0,
                 "#transfer-req": 0, "#host-receive-req": 2, "#retracted-req": 1,
                 "est. decode TFLOPS/s (per GPU)": 12.3, "est. read BW (GB/s per GPU)": 1500.0,
                 "est. write BW (GB/s per GPU)": 20.0})),
]

PREFILL_ROWS = [
    # 0.5.23 (reference 1.4)
    ("[2026-10-30 12:00:05] Prefill batch, #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, "
     "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.00",
     dict(time="2026-10-30 12:00:05", new_seq=1, new_token=28, cached_token=0, token_usage=0.0, running_req=0,
          queue_req=0, pending_token=0, graph=False, input_throughput=0.0)),
    # 0.5.9: no #pending-token, throughput before graph
    ("[2026-03-01 08:00:00 TP0] Prefill batch, #new-seq: 2, #new-token: 56, #cached-token: 7, token usage: 0.01, "
     "#running-req: 1, #queue-req: 3, input throughput (token/s): 1234.50, cuda graph: False",
     dict(time="2026-03-01 08:00:00", ranks={"TP": 0}, new_seq=2, new_token=56, cached_token=7, token_usage=0.01,
          running_req=1, queue_req=3, input_throughput=1234.5, graph=False)),
    # 0.4.10 / 0.5.3: header ".", trailing comma, no graph or throughput
    ("[2025-08-01 10:00:00] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, "
     "#running-req: 0, #queue-req: 0, ",
     dict(time="2025-08-01 10:00:00", new_seq=1, new_token=28, cached_token=0, token_usage=0.0, running_req=0,
          queue_req=0)),
    # 0.4.1: cache hit rate percent
    ("[2025-01-01 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 4, cache hit rate: 12.50%, "
     "token usage: 0.00, #running-req: 0, #queue-req: 0, ",
     dict(time="2025-01-01 10:00:00", ranks={"TP": 0}, new_seq=1, new_token=28, cached_token=4, token_usage=0.0,
          running_req=0, queue_req=0, extra={"cache hit rate": 12.5})),
    # 0.5.21+ replay token, PD-prefill counters, hybrid usage, iteration and ms
    ("[2026-10-30 12:00:05.007 TP1] Prefill batch [9], #new-seq: 3, #new-token: 300, #cached-token: 100, full token "
     "usage: 0.20, swa token usage: 0.30, #running-req: 2, #queue-req: 1, #pending-token: 64, #replay-token: 5, "
     "#bootstrap-req: 1, #inflight-req: 2, #optimistic-req: 0, cuda graph: True, input throughput (token/s): 999.99",
     dict(time="2026-10-30 12:00:05.007", ranks={"TP": 1}, iteration=9, new_seq=3, new_token=300, cached_token=100,
          token_usage=0.2, running_req=2, queue_req=1, pending_token=64, graph=True, input_throughput=999.99,
          extra={"swa token usage": 0.3, "#replay-token": 5, "#bootstrap-req": 1, "#inflight-req": 2,
                 "#optimistic-req": 0})),
]


def _expected(cls, values: dict) -> dict:
    out = dict.fromkeys(cls._fields)
    out.update(ranks={}, extra={})
    out.update(values)
    return out


@pytest.mark.parametrize("line,values", DECODE_ROWS)
def test_decode_line(line, values):
    stats = parse_decode_line(line)
    assert stats is not None
    assert stats._asdict() == _expected(DecodeStats, values)


@pytest.mark.parametrize("line,values", PREFILL_ROWS)
def test_prefill_line(line, values):
    stats = parse_prefill_line(line)
    assert stats is not None
    assert stats._asdict() == _expected(type(stats), values)


@pytest.mark.parametrize("line", [
    '[2026-10-30 12:00:03] INFO:     127.0.0.1:45680 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-10-30 12:00:03] Decode batch size is too large for graph capture",
    "",
])
def test_non_stats_lines(line):
    assert parse_decode_line(line) is None
    assert parse_prefill_line(line) is None


def test_whole_log_matches_line_by_line_parsing():
    """The bulk path (one regex per layout, records built column-wise) equals the one-line path."""
    decode = [line for line, _ in DECODE_ROWS] * 3
    prefill = [line for line, _ in PREFILL_ROWS] * 3
    noise = '[2026-10-30 12:00:03] INFO:     127.0.0.1:45680 - "POST /generate HTTP/1.1" 200 OK'
    text = "\n".join(x for pair in zip(decode, [noise] * len(decode)) for x in pair) + "\n" + "\n".join(prefill)
    for report in (parse_log(text), parse_log_bytes(text.encode())):
        assert report.decode == tuple(parse_decode_line(line) for line in decode)
        assert report.prefill == tuple(parse_prefill_line(line) for line in prefill)
        assert [d.ranks for d in report.decode[:2]] == [{"TP": 0}, {"TP": 0}]
        report.decode[0].ranks["XX"] = 1  # each record owns its dicts
        assert report.decode[1].ranks == {"TP": 0}


def test_bad_number_falls_back_to_none():
    line = ("[2026-10-30 12:00:06] Decode batch, #running-req: 1, #token: 412, token usage: 0.00, accept len: nan, "
            "accept rate: 0.81, cuda graph: True, gen throughput (token/s): 412.37, #queue-req: oops")
    good = line.replace("#queue-req: oops", "#queue-req: 3")
    report = parse_log_bytes(("\n".join([good, line, good]) + "\n").encode())
    assert [d.queue_req for d in report.decode] == [3, None, 3]
    assert report.decode[1].running_req == 1


def test_parse_fields():
    assert parse_fields("hidden_states shape=torch.Size([1, 7168]) fc_in=21504") == {
        "shape": "torch.Size([1, 7168])", "fc_in": "21504"}
    assert parse_fields("a=1,b=[1, (2, 3)], c='x, y' d={\"k\": [1]} e=f(g=1) h=") == {
        "a": "1", "b": "[1, (2, 3)]", "c": "'x, y'", "d": '{"k": [1]}', "e": "f(g=1)", "h": ""}
    assert parse_fields("ids=[1, 2 unterminated") == {"ids": "[1, 2 unterminated"}
    assert parse_fields("no fields here") == {}
    # deeper than the regex reaches, or a value running on past a bracket: walked by hand
    assert parse_fields("x=[[[1, 2]], [3]] y=2") == {"x": "[[[1, 2]], [3]]", "y": "2"}
    assert parse_fields("a=(1)b c=2") == {"a": "(1)b", "c": "2"}


@pytest.mark.parametrize("was_on", [True, False])
def test_parsing_leaves_the_cycle_collector_as_it_was(was_on):
    import gc

    (gc.enable if was_on else gc.disable)()
    try:
        parse_log_bytes(b"[2026-10-30 12:00:05 TP0] [EAGLE3-DEBUG] shape=1\n")
        parse_log("x\n")
        assert gc.isenabled() is was_on
    finally:
        gc.enable()


def test_extract_debug_lines():
    text = ("[2026-10-30 12:00:05 TP0] [EAGLE3-DEBUG] hidden_states shape=torch.Size([1, 7168]) fc_in=21504\r\n"
            "[2026-10-30 12:00:05 TP0] not a debug line shape=1\n"
            "[2026-10-30 12:00:05 TP0] [MY_TAG.v2-DEBUG] d2t_min=-3 d2t_max=120\n"
            "[2026-10-30 12:00:05 TP0] [EAGLE3-DEBUG-X] not matched=1\n")
    lines = extract_debug_lines(text)
    assert [d.text for d in lines] == [
        "[2026-10-30 12:00:05 TP0] [EAGLE3-DEBUG] hidden_states shape=torch.Size([1, 7168]) fc_in=21504",
        "[2026-10-30 12:00:05 TP0] [MY_TAG.v2-DEBUG] d2t_min=-3 d2t_max=120"]
    assert lines[0].fields == {"shape": "torch.Size([1, 7168])", "fc_in": "21504"}
    assert lines[1].fields == {"d2t_min": "-3", "d2t_max": "120"}
    assert parse_log_bytes(text.encode()).debug_lines == tuple(lines)


def test_debug_pattern_without_a_literal():
    text = "x [AUX] layer=2\ny [HID] n=1\nz [OTHER] n=2\n"
    pattern = r"\[(?:AUX|HID)\]"
    assert [d.fields for d in extract_debug_lines(text, pattern)] == [{"layer": "2"}, {"n": "1"}]
    assert [d.fields for d in parse_log_bytes(text.encode(), pattern).debug_lines] == [{"layer": "2"}, {"n": "1"}]


def test_clean_log():
    text = (FIXTURES / "clean.log").read_text()
    report = parse_log(text)
    assert report.ready is True
    assert report.server_args.startswith("ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct'")
    assert [p.new_token for p in report.prefill] == [7, 28]
    assert [(d.accept_len, d.accept_rate, d.gen_throughput) for d in report.decode] == [(3.42, 0.81, 412.37)]
    assert [d.fields for d in report.debug_lines] == [{"shape": "torch.Size([1, 7168])", "fc_in": "21504"}]
    assert report.diagnosis is None
    assert diagnose(text) is None
    assert parse_log_bytes(text.encode()) == report
    assert DEFAULT_DEBUG_PATTERN and READY_LINE in text


def test_not_ready_and_invalid_utf8():
    data = b"[2026-10-30 12:00:06] Decode batch, #running-req: 1, #token: 4\xff2, token usage: 0.00, #queue-req: 0\n"
    report = parse_log_bytes(data)
    assert report.ready is False and report.server_args is None
    assert report.decode[0].tokens is None and report.decode[0].running_req == 1


# (fixture, kind, words the summary must contain, text the first evidence line contains)
DIAGNOSES = [
    ("cuda_oom.log", "cuda-oom", ["--mem-fraction-static", "616.00 MiB"], "torch.OutOfMemoryError: CUDA out of memory"),
    ("kv_pool.log", "kv-pool-too-small", ["--mem-fraction-static", "0.62"], "RuntimeError: Not enough memory"),
    ("port_http.log", "port-in-use", ["30000", "--port"], "address already in use"),
    ("port_internal.log", "port-in-use", ["31005", "nccl_port"], "ValueError: nccl_port at 31005 is not available"),
    ("context_length.log", "context-length", ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "131072 > 2048"],
     "ValueError: Warning: Target model's context_length"),
    ("scheduler_exception.log", "scheduler-exception", ["KeyError: 'model.layers.0.self_attn.qkv_proj.weight'"],
     "KeyError: 'model.layers.0"),
    ("scheduler_died.log", "scheduler-died", ["rank 0", "-9", "dmesg"], "Rank 0 scheduler died during initialization"),
    ("scheduler_dead_old.log", "scheduler-died", ["rank 1", "-11"], "Rank 1 scheduler is dead"),
    ("nccl.log", "nccl", ["NCCL_DEBUG=INFO"], "NCCL error in:"),
    ("nccl_warn.log", "nccl", ["NCCL_DEBUG=INFO"], "NCCL WARN Cuda failure"),
    ("aux_capture.log", "missing-aux-capture", ["KimiLinearForCausalLM", "set_eagle3_layers_to_capture"],
     "does not implement set_eagle3_layers_to_capture"),
    ("cuda_graph.log", "cuda-graph-capture", ["CUBLAS_STATUS_EXECUTION_FAILED", "--mem-fraction-static"],
     "Capture cuda graph failed"),
    ("warmup.log", "init-failed", ["warmup", "AssertionError: <Response [500]>"], "AssertionError: <Response [500]>"),
    ("health.log", "health-check", ["SGLANG_HEALTH_CHECK_TIMEOUT"], "Health check failed"),
    ("unrecognized.log", "unknown-flag", ["--speculative-bogus"], "error: unrecognized arguments"),
    ("ambiguous.log", "unknown-flag", ["--speculative-draft", "full flag name"], "error: ambiguous option"),
    ("traceback.log", "traceback", ["RuntimeError: could not load the draft model config"],
     "RuntimeError: could not load the draft model config"),
    ("wrapped_logger.log", "scheduler-exception", ["ValueError: Unsupported architectures"], "ValueError: Unsupported"),
    ("cause_above.log", "scheduler-exception", ["['DeepseekOCRForCausalLM']", "printed above", "glm4v_moe"],
     "ValueError: Model architectures ['DeepseekOCRForCausalLM']"),
    ("patched_module_import.log", "scheduler-exception", ["KimiK25ForConditionalGeneration", "kimi_k25.py, line 612"],
     "ValueError: Model architectures ['KimiK25ForConditionalGeneration']"),
]


@pytest.mark.parametrize("name,kind,words,evidence", DIAGNOSES)
def test_diagnosis(name, kind, words, evidence):
    text = (FIXTURES / name).read_text()
    found = diagnose(text)
    assert found is not None and found.kind == kind
    assert "\n" not in found.summary
    for word in words:
        assert word in found.summary
    assert evidence in found.evidence[0]
    assert all(line in text for line in found.evidence)
    assert parse_log(text).diagnosis == found
    assert parse_log_bytes(text.encode()).diagnosis == found


@pytest.mark.parametrize("name,kind,words,evidence", [row for row in DIAGNOSES if row[1] != "unknown-flag"])
def test_diagnosis_inside_a_big_log(name, kind, words, evidence):
    """The failure after ~3 MB of normal traffic is found by the fast scan just as in the excerpt."""
    clean = (FIXTURES / "clean.log").read_bytes()
    data = clean * 2000 + (FIXTURES / name).read_bytes() + clean * 10
    report = parse_log_bytes(data)
    assert report.diagnosis == diagnose((FIXTURES / name).read_text())
    assert len(report.decode) == 2010 and len(report.prefill) == 4020 and len(report.debug_lines) == 2010


def test_most_specific_wins():
    oom = (FIXTURES / "cuda_oom.log").read_text()
    generic = (FIXTURES / "scheduler_exception.log").read_text()
    assert diagnose(generic + oom).kind == "cuda-oom"
    assert diagnose(generic).kind == "scheduler-exception"


def test_failure_far_before_the_end_is_not_the_diagnosis():
    """Only the last TAIL_SIZE bytes are searched: a crash is the last thing a dying server writes."""
    from orchestrator.engines.sglang import logs

    clean = (FIXTURES / "clean.log").read_bytes()
    failure = (FIXTURES / "cuda_oom.log").read_bytes()
    filler = clean * (logs.TAIL_SIZE // len(clean) + 10)
    assert parse_log_bytes(failure + filler).diagnosis is None
    assert parse_log_bytes(filler + failure).diagnosis.kind == "cuda-oom"
    assert parse_log_bytes((FIXTURES / "unrecognized.log").read_bytes() + filler).diagnosis.kind == "unknown-flag"


def test_big_log_is_cut_down_on_the_host_and_parses_the_same(tmp_path, monkeypatch):
    """server.read_log over FETCH_LIMIT: real grep on the host side; the excerpt parses like the whole."""
    import asyncio

    from orchestrator.host import server
    from orchestrator.engines.sglang import logs
    from orchestrator.core.inventory import Host
    from orchestrator.remote import connect

    clean = (FIXTURES / "clean.log").read_bytes()
    noise = b'[2026-10-30 12:00:03] INFO:     127.0.0.1:45680 - "POST /generate HTTP/1.1" 200 OK\n' * 200
    data = (FIXTURES / "unrecognized.log").read_bytes() + (clean + noise) * 300 + \
        (FIXTURES / "scheduler_exception.log").read_bytes()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / server.LOG_NAME).write_bytes(data)
    monkeypatch.setattr(server, "FETCH_LIMIT", 1 << 20)
    monkeypatch.setattr(logs, "TAIL_SIZE", 1 << 16)
    monkeypatch.setattr(engines.get("sglang"), "log_tail_size", 1 << 16)

    async def fetch() -> bytes:
        conn = await connect(Host(name="h", transport="local"))
        try:
            return await server.read_log(conn, server.Server(str(run_dir), 0, 0), engines.get("sglang"),
                                         DEFAULT_DEBUG_PATTERN)
        finally:
            await conn.close()

    cut = asyncio.run(fetch())
    assert len(data) > server.FETCH_LIMIT and len(cut) < len(data) / 5
    whole, part = parse_log_bytes(data), parse_log_bytes(cut)
    assert part.decode == whole.decode and part.prefill == whole.prefill and part.debug_lines == whole.debug_lines
    assert (part.ready, part.server_args) == (whole.ready, whole.server_args) and whole.ready
    assert part.diagnosis == whole.diagnosis and whole.diagnosis.kind == "unknown-flag"
    assert cut.endswith((FIXTURES / "scheduler_exception.log").read_bytes())
