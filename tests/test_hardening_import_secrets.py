"""Issue 24, item 9: `orch import` hides secrets in everything it stores and prints: the values of names
the inventory declares (`secrets:`) or `--secret` names, values assigned to names that say they are
secret, and well-known token shapes (hf_, sk-, ghp_)."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

from orchestrator.core.secrets import mask_log
from orchestrator.engines import seriesblock
from support.cli import orch
from support.specs import FIXTURES

HF = "hf_" + "Ab3" * 10
OPENAI = "sk-proj-" + "Zq9" * 8
GITHUB = "ghp_" + "Gh7" * 12
DECLARED = "plain-looking-value-42"


def _log_with_secrets(folder: Path) -> Path:
    lines = (FIXTURES / "sglang_eagle3_debug.log").read_text().splitlines(keepends=True)
    leaky = [f"export HF_TOKEN={HF}\n", f"[EAGLE3-DEBUG] shape=torch.Size([1, 7168]) key={OPENAI}\n",
             f"cloning with {GITHUB} into /tmp\n", f"MODEL_MIRROR_CRED={DECLARED}\n"]
    log = folder / "leaky.log"
    log.write_text("".join(lines[:5] + leaky + lines[5:]))
    return log


def _everything_stored(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        texts = [repr(row) for table in ("run", "debugrow", "eventrow", "metricrow", "seriesrow")
                 for row in conn.execute(f"SELECT * FROM {table}")]
        texts += [zlib.decompress(data).decode() for data, in conn.execute("SELECT data FROM logrow")]
        texts += [repr(list(seriesblock.points(seriesblock.unpack(kind, seq, data))))  # the packed series
                  for kind, seq, data in conn.execute("SELECT kind, seq, data FROM seriesblockrow")]
    return "\n".join(texts)


def test_import_hides_token_shapes_declared_names_and_secret_params(tmp_path):
    (tmp_path / "inventory.yaml").write_text(
        "hosts:\n  gpu1:\n    transport: local\n    workdir: ~/.orch\n    secrets: [MODEL_MIRROR_CRED]\n")
    done = orch(tmp_path, "import", str(_log_with_secrets(tmp_path)), "--params", f"hub_token={HF}",
                "--params", f"note=pulled with {GITHUB}", "--secret", "UNUSED_NAME")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = orch(tmp_path, "show", "last", "--json").stdout + orch(tmp_path, "logs", "last").stdout
    stored = _everything_stored(tmp_path / "orch.db")
    for secret in (HF, OPENAI, GITHUB, DECLARED):
        assert secret not in done.stdout + done.stderr and secret not in shown and secret not in stored, secret
    assert "HF_TOKEN=<secret:HF_TOKEN>" in stored and "MODEL_MIRROR_CRED=<secret:MODEL_MIRROR_CRED>" in stored
    record = json.loads(orch(tmp_path, "show", "last", "--json").stdout)
    assert record["params"]["hub_token"] == "<secret:hub_token>" and record["params"]["tp_size"] == 8
    assert record["metrics"]["accept_len"] == 1.0  # the parse of the masked log is the same


def test_a_secret_name_given_with_the_option_and_set_in_the_shell_is_hidden(tmp_path, monkeypatch):
    log = tmp_path / "by_hand.log"
    log.write_text((FIXTURES / "sglang_eagle3_debug.log").read_text() + f"mirror said {DECLARED} ok\n")
    monkeypatch.setenv("MIRROR_LOGIN", DECLARED)
    done = orch(tmp_path, "import", str(log), "--secret", "MIRROR_LOGIN")
    assert done.returncode == 0, done.stderr
    assert DECLARED not in _everything_stored(tmp_path / "orch.db")
    assert "mirror said <secret:MIRROR_LOGIN> ok" in orch(tmp_path, "logs", "last").stdout


def test_numbers_and_words_near_secret_words_stay():
    text = (b"ServerArgs(api_key='abcd1234zz', max_total_tokens=4096, speculative_num_draft_tokens=4, "
            b"hf_token=None)\n#token: 1234, token usage: 0.05, gen throughput (token/s): 55.3\n"
            b"--api-key longsecret99 --speculative-num-draft-tokens 4\n")
    masked = mask_log(text).decode()
    assert "api_key='<secret:api_key>'" in masked and "--api-key <secret:api-key>" in masked
    for kept in ("max_total_tokens=4096", "speculative_num_draft_tokens=4", "hf_token=None", "#token: 1234",
                 "token usage: 0.05", "--speculative-num-draft-tokens 4"):
        assert kept in masked
