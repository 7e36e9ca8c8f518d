"""A busy server's log read at array speed: pieces of SGLang stats lines in one plain layout
(engines/sglang/statarrays.py), the secrets search told from one line of them
(`secrets.mask_log(shape=...)`), and series blocks kept in fewer bytes (engines/compactcolumns.py).
Each gives exactly what the line-by-line reading gives, and anything else falls back to it."""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.core import secrets
from orchestrator.core.spec import DEFAULT_DEBUG_PATTERN
from orchestrator.engines import seriesblock
from orchestrator.engines.seriesblock import FLOAT, INT, NO_INT, TEXT, Column, SeriesBlock
from orchestrator.engines.sglang import logstream, statcolumns

ROOT = Path(__file__).resolve().parents[1]


def decode_line(rng: random.Random, i: int, ranks: str = " TP0") -> str:
    return (f"[2026-10-30 12:{i // 600 % 60:02d}:{i // 10 % 60:02d}{ranks}] Decode batch, #running-req: {rng.randint(1, 64)}, "
            f"#token: {rng.randint(100, 400000)}, token usage: {rng.random():.2f}, accept len: {rng.uniform(1, 4):.2f}, "
            f"accept rate: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(50, 9000):.2f}, "
            f"#queue-req: {rng.randint(0, 20)}")


def plain(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [decode_line(rng, i) for i in range(n)]


# One line changed among plain ones: each must be read as the line-by-line parse reads it.
CHANGES = {
    "iteration": lambda line: line.replace("Decode batch,", "Decode batch [12],"),
    "no ranks": lambda line: line.replace(" TP0]", "]"),
    "other ranks": lambda line: line.replace(" TP0]", " DP1 TP0]"),
    "millis": lambda line: line.replace(" TP0]", ".123 TP0]"),
    "value from a dot": lambda line: re.sub(r"accept len: \d+", "accept len: ", line),
    "two dots": lambda line: line.replace("token usage: 0", "token usage: 0.0"),
    "no decimals": lambda line: line.replace("accept rate: 0.", "accept rate: 0"),
    "more decimals": lambda line: line.replace("accept rate: 0.", "accept rate: 0.0"),
    "a word for a number": lambda line: line.replace("#queue-req: ", "#queue-req: x"),
    "cut short": lambda line: line[:-12],
    "trailing comma": lambda line: line + ",",
    "carriage return": lambda line: line + "\r",
    "fields swapped": lambda line: line.replace("#running-req", "#tmp").replace("#queue-req", "#running-req").replace("#tmp", "#queue-req"),
    "an extra field": lambda line: line + ", cap len: 7",
    "graph off": lambda line: line.replace("cuda graph: True", "cuda graph: False"),
    "graph unknown": lambda line: line.replace("cuda graph: True", "cuda graph: Maybe"),
    "digits by the graph": lambda line: line.replace("cuda graph: True", "cuda graph: 1True"),
    "a name's digit moved": lambda line: line.replace("#token: ", "#token1: "),
    "another logger's prefix": lambda line: "2026-10-30 12:00:00,659 [INFO] " + line,
    "19 digits": lambda line: re.sub(r"#token: \d+", "#token: 1234567890123456789", line),
    "18 digits": lambda line: re.sub(r"#token: \d+", "#token: 999999999999999999", line),
    "not a stats line": lambda line: "[2026-10-30 12:00:00 TP0] Cache flushed successfully!",
    "a debug line": lambda line: "[2026-10-30 12:00:00 TP0] [EAGLE3-DEBUG] hidden shape=[1, 7168] step=4",
}


def streamed_points(text: str) -> tuple[list, list]:
    """The piece's series points and debug lines, read as `orch import` reads a piece of a big log."""
    stream = logstream.LogStream(DEFAULT_DEBUG_PATTERN)
    piece = text.encode()
    stream.shape(piece)
    blocks, debug = stream.feed(piece)
    return [p for block in blocks for p in seriesblock.points(block)], debug


def whole_points(text: str) -> tuple[list, list]:
    report = engines.get("sglang").parse_log(text.encode(), DEFAULT_DEBUG_PATTERN)
    return list(report.series), list(report.debug_lines)


def test_a_plain_piece_is_read_at_once_as_the_lines_one_by_one():
    lines = plain(300)
    text = "\n".join(lines) + "\n"
    assert statcolumns.plain_piece(text.encode(), "Decode batch", 0) is not None
    assert streamed_points(text) == whole_points(text)
    stream = logstream.LogStream(DEFAULT_DEBUG_PATTERN)
    stream.feed(text.encode())
    whole = engines.get("sglang").parse_log(text.encode(), DEFAULT_DEBUG_PATTERN)
    assert {m.name: m.value for m in stream.report().measures} == {m.name: m.value for m in whole.measures}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("where", [0, 137, 299])
def test_a_piece_with_one_line_otherwise_is_read_as_the_lines_one_by_one(change, where):
    lines = plain(300, seed=where)
    lines[where] = CHANGES[change](lines[where])
    text = "\n".join(lines) + "\n"
    assert streamed_points(text) == whole_points(text)


def test_every_plain_layout_value_is_the_float_python_reads():
    rng = random.Random(3)
    printed = [f"{rng.randint(0, 10**rng.randint(0, 12))}.{rng.randint(0, 999):0{rng.randint(3, 3)}d}"[:rng.randint(1, 16)]
               .rstrip(".") or "0" for _ in range(2000)]
    lines = [re.sub(r"gen throughput \(token/s\): [\d.]+", f"gen throughput (token/s): {value}", line)
             for line, value in zip(plain(2000), printed)]
    text = ("\n".join(lines) + "\n").encode()
    blocks = statcolumns.plain_piece(text, "Decode batch", 0)
    assert blocks is not None
    got = [v for b in blocks for c in b.columns if c.name == "gen_throughput" for v in c.values]
    assert [math.copysign(1, v) for v in got] == [1.0] * len(got) and got == [float(p) for p in printed]


# ---- the secrets search told from one line -----------------------------------------------------

def same_shape(template: str, n: int = 50) -> bytes:
    """n lines of the template with other runs of digits in its {} places."""
    rng = random.Random(len(template))
    return "".join(template.format(*(str(rng.randint(0, 10**rng.randint(0, 25))) for _ in range(template.count("{}"))))
                   + "\n" for _ in range(n)).encode()


@pytest.mark.parametrize("template", [
    "[2026-10-30 12:00:{} TP0] Decode batch, #running-req: {}, #token: {}, token usage: {}.{}",
    "[{}] loading with token={} and key: {}",  # a number is no secret
    "[{}] loading with token=abc{} and key: {}",  # hidden on every line
    "[{}] --api-key x{} --token {}",
    "[{}] HF_TOKEN=hf_{} sk-{}",  # a token shape only once its digits run long enough
    "[{}] ghp_{} and github_pat_{}",
    "[{}] passwd: .{}",  # a run from a dot is no number
    "[{}] secret_{}: value{}",
])
def test_the_search_told_from_one_line_hides_what_the_whole_search_hides(template):
    data = same_shape(template)
    line = data[:data.index(b"\n")]
    assert secrets.mask_log(data, (), {}, shape=line) == secrets.mask_log(data, (), {})


def test_a_listed_name_with_a_digit_is_searched_for_whole():
    data = same_shape("[{}] S3={}x")  # hidden under its listed name: a "3" the one line reads as "0"
    line = data[:data.index(b"\n")]
    assert secrets.mask_log(data, ("S3",), {}, shape=line) == secrets.mask_log(data, ("S3",), {}) != data


# ---- series blocks in fewer bytes ----------------------------------------------------------------

def test_a_compact_block_gives_back_every_value_bit_for_bit():
    rng = random.Random(5)
    n = 3000
    for trial in range(12):
        times = [f"12:00:{i // rng.choice([1, 3, 100]):05d}" if rng.random() < .95 else None for i in range(n)] \
            if trial % 3 else [f"t{i}" for i in range(n)]
        columns = (
            Column("big", INT, array("q", [rng.randint(-10**rng.randint(0, 18), 10**rng.randint(0, 18)) for _ in range(n)])),
            Column("small", INT, array("q", [NO_INT if trial % 2 and rng.random() < .1 else rng.randint(0, 100) for _ in range(n)]), True),
            Column("decimals", FLOAT, array("d", [round(rng.uniform(0, 10**rng.randint(0, 6)), rng.randint(0, 4)) for _ in range(n)])),
            Column("odd", FLOAT, array("d", [rng.choice([-0.0, 0.0, 1.5, math.nan, 1e300, 2.83, 0.1 + 0.2]) for _ in range(n)]), True),
            Column("signed zero", FLOAT, array("d", [rng.choice([-0.0, 0.5, -2.25]) for _ in range(n)])),
            Column("ranks", TEXT, [rng.choice(["TP0", None, "DP1 TP0", ""]) if trial % 2 else "TP0" for _ in range(n)], True),
        )
        block = SeriesBlock("decode", 7, times, columns)
        back = seriesblock.unpack("decode", 7, seriesblock.pack(block))
        assert back.times == block.times
        for got, want in zip(back.columns, block.columns):
            assert (got.name, got.kind, got.optional) == (want.name, want.kind, want.optional)
            if want.kind in (FLOAT, INT):
                assert got.values.typecode == want.values.typecode and got.values.tobytes() == want.values.tobytes()
            else:
                assert list(got.values) == list(want.values)
        assert list(seriesblock.points(back)) == list(seriesblock.points(block))


def test_a_busy_servers_block_is_kept_in_fewer_bytes():
    text = ("\n".join(plain(20000)) + "\n").encode()
    block, = statcolumns.plain_piece(text, "Decode batch", 0)
    wide = seriesblock.SeriesBlock(block.kind, block.first, block.times, block.columns)
    import zlib
    import json
    parts = [seriesblock._text_bytes(wide.times)] + [c.values.tobytes() if c.kind in (FLOAT, INT)
                                                     else seriesblock._text_bytes(c.values) for c in wide.columns]
    as_before = zlib.compress(json.dumps({"n": len(wide)}).encode() + b"\n" + b"".join(parts), 1)
    assert len(seriesblock.pack(block)) < 0.75 * len(as_before)  # random values: mostly the times' runs


# ---- bounded memory ------------------------------------------------------------------------------

def peak_rss_of_import(log: Path, db: Path) -> int:
    """The importing process's own peak RSS, in KiB."""
    child = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "--db", f"sqlite:///{db}", "import", str(log)],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, child.stderr.read() if child.stderr else ""
    return usage.ru_maxrss


@pytest.mark.slow
def test_a_log_of_tens_of_megabytes_is_imported_in_the_memory_of_a_few_pieces(tmp_path):
    rng = random.Random(0)
    block = ("\n".join(decode_line(rng, i) for i in range(20000)) + "\n").encode()
    head = b"[2026-10-30 12:00:00] server_args=ServerArgs(model_path='m', tp_size=8)\n"
    peaks = []
    for size in (24, 96):  # MB: the bigger log four times the smaller
        log = tmp_path / f"{size}.log"
        with open(log, "wb") as f:
            f.write(head)
            for _ in range((size << 20) // len(block)):
                f.write(block)
        peaks.append(peak_rss_of_import(log, tmp_path / f"{size}.db"))
    assert peaks[1] < peaks[0] + (24 << 10), peaks  # 72 MB more log, under 24 MB more memory
    assert peaks[1] < 300 << 10, peaks
