"""Real log styles (tests/fixtures/logs/README.md names each excerpt's thread): the prefixes stats
lines carry, and lines a terminal cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.core.spec import DEFAULT_DEBUG_PATTERN
from orchestrator.run import collect
from orchestrator.engines.sglang.logs import parse_decode_line, parse_log, parse_log_bytes, parse_prefill_line

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

# (fixture, kind, index, time, ranks) of stats records
STYLES = [
    ("prefix_dp_tp.log", "decode", 0, "2025-05-31 18:31:21", {"DP": 0, "TP": 0}),
    ("prefix_dp_tp.log", "decode", 5, "2026-03-17 17:35:07", {"DP": 13, "TP": 13}),
    ("prefix_dp_tp.log", "prefill", 0, "2025-05-31 18:31:19", {"DP": 0, "TP": 0}),
    ("prefix_time_only.log", "decode", 0, "04:40:55", {"TP": 0}),
    ("prefix_time_only.log", "prefill", 1, "16:43:29", {"TP": 0}),
    ("prefix_logging_level.log", "decode", 0, "2026-06-07 10:59:31,659", {}),
    ("prefix_logging_level.log", "decode", 1, "2026-06-07 10:59:32", {"DP": 0, "TP": 1}),
    ("prefix_logging_level.log", "prefill", 0, "2026-06-07 10:59:31,402", {}),
    ("prefix_level_pid.log", "decode", 0, "2025-12-04 20:35:53", {}),
    ("prefix_level_pid.log", "decode", 1, "2025-12-04 20:35:54", {"TP": 3}),
    ("prefix_level_pid.log", "prefill", 0, "2025-12-04 20:35:52", {}),
]

SGLANG = engines.get("sglang")


@pytest.mark.parametrize("name,kind,index,time,ranks", STYLES)
def test_every_prefix_style_keeps_time_and_ranks(name, kind, index, time, ranks):
    text = (FIXTURES / name).read_text()
    records = getattr(parse_log_bytes(text.encode()), kind)
    assert (records[index].time, records[index].ranks) == (time, ranks)
    assert records[index].running_req is not None
    rows = [r for r in collect.series_rows(7, SGLANG.parse_log(text.encode(), DEFAULT_DEBUG_PATTERN)) if r.kind == kind]
    assert rows[index].time == time
    assert rows[index].values.get("ranks") == (" ".join(f"{k}{v}" for k, v in ranks.items()) or None)


@pytest.mark.parametrize("name", sorted({row[0] for row in STYLES} | {"terminal_cut.log", "clean.log"}))
def test_bulk_parse_equals_line_by_line_in_every_style(name):
    """The one-regex-per-layout path reads each style exactly as the one-line path does, also when
    the lines repeat past one block."""
    lines = (FIXTURES / name).read_text().splitlines() * 1500
    text = "\n".join(lines) + "\n"
    decode = tuple(r for r in map(parse_decode_line, lines) if r is not None)
    prefill = tuple(r for r in map(parse_prefill_line, lines) if r is not None)
    for report in (parse_log(text), parse_log_bytes(text.encode())):
        assert report.decode == decode and report.prefill == prefill


def test_another_loggers_wrapping_keeps_sglangs_time_and_ranks():
    line = ("2025-03-08 02:04:48,693 - __main__ - INFO - [2025-03-08 02:04:48 TP1] Decode batch, #running-req: 2, "
            "#token: 4078, token usage: 0.00, cuda graph: True, gen throughput (token/s): 447.31, #queue-req: 0")
    stats = parse_decode_line(line)
    assert (stats.time, stats.ranks, stats.gen_throughput) == ("2025-03-08 02:04:48", {"TP": 1}, 447.31)
    ci = parse_decode_line("[2025-11-06T02:08:27.278Z] [2025-11-06 02:08:27] Decode batch, #running-req: 1, #token: 9")
    assert (ci.time, ci.ranks, ci.tokens) == ("2025-11-06 02:08:27", {}, 9)
    tag = parse_decode_line("[EAGLE3] Decode batch, #running-req: 1, #token: 9")  # a bracket that is no rank
    assert (tag.time, tag.ranks) == (None, {})


def test_a_field_cut_off_by_a_terminal_never_becomes_a_column():
    report = parse_log((FIXTURES / "terminal_cut.log").read_text())
    rows = collect.series_rows(1, SGLANG.parse_log((FIXTURES / "terminal_cut.log").read_bytes(), DEFAULT_DEBUG_PATTERN))
    columns = {name for row in rows for name in row.values}
    assert not {"token usaccept rate", "#cached-tounning-req", "#cached-trunning-req"} & columns
    assert all(not d.extra for d in report.decode) and all(not p.extra for p in report.prefill)
    first = report.decode[0]
    assert (first.running_req, first.tokens, first.gen_throughput, first.graph) == (45, 44672, 863.65, False)
    assert first.queue_req is None and first.accept_rate is None
    assert [p.pending_token for p in report.prefill] == [70187, 69308, 68464]


def test_a_whole_line_keeps_its_unknown_fields():
    line = ("[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, accept len: "
            "1.67, accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, cuda graph: True, gen throughput "
            "(token/s): 183.10, #queue-req: 0, ")
    assert parse_decode_line(line).extra == {"pre-allocated usage": 0.22, "#prealloc-req": 0}


def test_accept_rate_is_aggregated_as_accept_len_is():
    measures = {m.name: m for m in SGLANG.parse_log((FIXTURES / "prefix_logging_level.log").read_bytes(),
                                                   DEFAULT_DEBUG_PATTERN).measures}
    assert measures["accept_len"].value == pytest.approx((2.41 + 2.55) / 2)
    assert measures["accept_rate"].value == pytest.approx((0.47 + 0.52) / 2)
    assert measures["accept_rate"].note == measures["accept_len"].note == "mean of 2 decode-line intervals"
    assert measures["accept_rate"].source == "decode_log"
    other = SGLANG.parse_log((FIXTURES / "prefix_time_only.log").read_bytes(), DEFAULT_DEBUG_PATTERN).measures
    assert {m.name: m.value for m in other}["accept_rate"] is None
