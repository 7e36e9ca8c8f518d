"""Secrets reach the server and nothing else: not the launch script, not a command line, not the
database, not any command's output; the run folder is private and the secrets file is gone."""

from __future__ import annotations

import json
import stat

import yaml

from conftest import free_port
from orchestrator.core import secrets
from support.cli import orch

TOKEN = "hf_s3cr3t_token_value_42"
KEY = "sk-unlisted-name-secret-99"
LISTED = "plain-looking-value-77"


def test_names_that_say_secret():
    for name in ("HF_TOKEN", "OPENAI_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "GITHUB_AUTH",
                 "HUGGING_FACE_HUB_TOKEN", "MY_CREDENTIALS", "SSH_PASSPHRASE", "APIKEY"):
        assert secrets.is_secret_name(name), name
    for name in ("NCCL_DEBUG", "TOKENIZERS_PARALLELISM", "PYTHONPATH", "KEYBOARD", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
                 "CUDA_VISIBLE_DEVICES", "PATH"):
        assert not secrets.is_secret_name(name), name
    assert secrets.is_secret_name("WANDB_ENTITY", ["WANDB_ENTITY"])


def test_scrub_reaches_into_structures():
    hidden = {"HF_TOKEN": TOKEN}
    data = {"text": f"Bearer {TOKEN}", "list": [TOKEN, 3], TOKEN: b"x" + TOKEN.encode()}
    assert secrets.scrub(data, hidden) == {"text": "Bearer <secret:HF_TOKEN>", "list": ["<secret:HF_TOKEN>", 3],
                                           "<secret:HF_TOKEN>": b"x<secret:HF_TOKEN>"}


def leaky_experiment(demo_path):
    """The demo's last (healthy) variant plus a patch that prints the token from the server's own environment."""
    spec = yaml.safe_load(demo_path.read_text())
    name, variant = list(spec["variants"].items())[-1]  # the healthy one
    spec["patches"]["leak"] = {
        "file": "sglang:srt/models/llama_eagle3.py",
        "find": "hidden_states = forward_batch.spec_info.hidden_states",
        "insert_after": 'print(f"[LEAK-DEBUG] token={__import__(\'os\').environ.get(\'HF_TOKEN\')} '
                        'key={__import__(\'os\').environ.get(\'OPENAI_KEY\')} '
                        'note={__import__(\'os\').environ.get(\'ENDPOINT_NOTE\')}", flush=True)\n',
    }
    variant = {**variant, "patches": [*variant.get("patches", []), "leak"]}
    variant.pop("expect", None)
    spec["variants"] = {name: variant}
    spec["workload"] = {"requests": 2, "max_new_tokens": 16, "concurrency": 1}
    demo_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return name


def test_a_runs_secrets_reach_the_server_and_nothing_else(project, demo):
    variant = leaky_experiment(demo)
    # a value whose name says nothing, listed under the inventory host's `secrets:`
    inventory = project / "inventory.yaml"
    inventory.write_text(inventory.read_text() + "    secrets: [ENDPOINT_NOTE]\n")
    done = orch(project, "run", str(demo), "--set", f"port={free_port()}", "--set", f"env.HF_TOKEN={TOKEN}",
                "--set", f"env.OPENAI_KEY={KEY}", "--set", f"env.ENDPOINT_NOTE={LISTED}")
    outputs = [done.stdout + done.stderr]
    assert done.returncode == 0, outputs[0]
    record = json.loads(orch(project, "show", "last", "--json").stdout)
    # the server had the values: its debug line carried them, hidden by name in the record
    assert any("token=<secret:HF_TOKEN> key=<secret:OPENAI_KEY> note=<secret:ENDPOINT_NOTE>" in d["text"] for d in record["debug_lines"]), record["debug_lines"]
    assert record["env"]["HF_TOKEN"] == "<secret:HF_TOKEN>" and record["env"]["OPENAI_KEY"] == "<secret:OPENAI_KEY>"
    assert record["env"]["ENDPOINT_NOTE"] == "<secret:ENDPOINT_NOTE>"
    for args in (("show", "last"), ("show", "last", "--json"), ("logs", "last"), ("logs", "last", "--debug"),
                 ("diff", "last", "last"), ("ls", "--json"), ("render", str(demo))):
        outputs.append(orch(project, *args).stdout)
    for text in outputs:
        assert TOKEN not in text and KEY not in text and LISTED not in text
    for name in ("orch.db", "orch.db-wal"):
        if (project / name).exists():
            data = (project / name).read_bytes()
            assert TOKEN.encode() not in data and KEY.encode() not in data and LISTED.encode() not in data
    run_dir = next((project / "host" / "runs").iterdir())
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert not (run_dir / "secrets.env").exists()
    launch = (run_dir / "launch.sh").read_text()
    assert TOKEN not in launch and KEY not in launch and LISTED not in launch and "HF_TOKEN" not in launch
    assert variant in record["variant"]


def test_a_database_password_never_reaches_the_screen(tmp_path):
    """A PostgreSQL URL with its password (in the user part or as an option) on a port nothing
    listens on: every command's one-line error names the database with *** for the password."""
    import subprocess
    import sys

    from conftest import ROOT

    port = free_port()
    in_user, as_option = (f"postgresql://bob:hunter2@127.0.0.1:{port}/orch",
                          f"postgresql://bob@127.0.0.1:{port}/orch?password=hunter2&connect_timeout=5")
    log = str(ROOT / "tests" / "fixtures" / "logs" / "cuda_oom.log")
    for url, command in ((in_user, ["ls"]), (as_option, ["show", "1"]), (in_user, ["import", log])):
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--db", url, *command], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "PYTHONPATH": str(ROOT)})
        said = done.stdout + done.stderr
        assert done.returncode != 0 and "hunter2" not in said and "***" in said, (command, said)
