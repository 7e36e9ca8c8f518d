from orchestrator.core import diff
from orchestrator.store.database import DebugRow, MetricRow, PatchRow, Run, Store


def make_run(store, variant, accept, width, command):
    run = Run(uid=f"2026-{variant}", experiment="e", variant=variant, host="local", params={"tp_size": 8, "v": variant},
              env={"A": "1"}, command=command.replace("UID", f"2026-{variant}"))
    store.add(run)
    store.add(MetricRow(run_id=run.id, name="accept_len", value=accept, source="meta_info"),
              MetricRow(run_id=run.id, name="accept_len", value=None, source="server_info", note="absent"),
              PatchRow(run_id=run.id, seq=1, name="dbg", target="sglang:x.py", file="/x.py", sha256_before="a" * 64,
                       sha256_after="b" * 64, state="reverted"),
              DebugRow(run_id=run.id, seq=0, text=f"[EAGLE3-DEBUG] shape=torch.Size([1, {width}])",
                       fields={"shape": f"torch.Size([1, {width}])"}))
    return run


def test_store_round_trip_and_references(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    a = make_run(store, "baseline", 1.0, 64, "# UID\nrun --x 1\n")
    b = make_run(store, "aux-fix", 2.9, 192, "# UID\nrun --x 2\n")
    assert store.get("last").id == b.id and store.get("last~1").id == a.id
    assert store.get(str(a.id)).uid == a.uid and store.get("2026-aux").id == b.id
    record = store.record(a)
    assert record["metrics"]["accept_len"] == 1.0
    assert [s["source"] for s in record["metric_sources"]["accept_len"]] == ["meta_info", "server_info"]
    store.save_log(a, b"line\n" * 1000)
    assert store.log(a) == b"line\n" * 1000


def test_diff_shows_accept_length_and_hidden_width_side_by_side(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    a = store.record(make_run(store, "baseline", 1.0, 64, "# UID\nrun --x 1\n"))
    b = store.record(make_run(store, "aux-fix", 2.9, 192, "# UID\nrun --x 2\n"))
    rows = {(r.section, r.key): r for r in diff.compare(a, b)}
    assert rows[("metrics", "accept_len")].delta == 1.9 or abs(rows[("metrics", "accept_len")].delta - 1.9) < 1e-9
    assert rows[("debug_lines", "EAGLE3-DEBUG shape")].a == "torch.Size([1, 64])"
    assert rows[("debug_lines", "EAGLE3-DEBUG shape")].b == "torch.Size([1, 192])"
    assert ("params", "tp_size") not in rows and rows[("params", "v")].b == "aux-fix"
    assert diff.command_diff(a, b)[-2:] == ["-run --x 1", "+run --x 2"]
    data = diff.as_json(a, b, diff.compare(a, b))
    assert data["metrics"]["accept_len"]["b"] == 2.9 and "command" in data


def test_unknown_run_says_how_to_find_one(tmp_path):
    import pytest

    from orchestrator.errors import StoreError

    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    with pytest.raises(StoreError, match="no run '7' .*see `orch ls`"):
        store.get("7")


def test_diff_hides_what_differs_only_by_where_the_runs_ran_and_unchanged_metrics(tmp_path):
    """Two runs of one configuration on two hosts: their model path (written with `{{ host.* }}`),
    port and GPU slot differ, and every text that echoes them (the engine's tokenizer path, the
    launch script's lines), as does the seed the engine picked at its start; a real change (steps)
    and a changed metric stay shown, an equal metric is hidden, and `--all` (everything) shows it
    all as before."""
    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    spec = {"params": {"model_path": "{{ host.models }}/target", "steps": 3}}
    records, specs = [], []
    for n, (host, steps, port, tok_s) in enumerate([("a", 3, 31871, 100.0), ("b", 5, 30412, 120.0)]):
        run = Run(uid=f"2026-h-{n}", experiment="e", variant="v", host=host, spec=spec,
                  params={"model_path": f"/{host}/models/target", "steps": steps, "port": port, "gpus": str(n)},
                  effective_params={"tokenizer_path": f"/{host}/models/target", "port": port, "steps": steps,
                                    "random_seed": 4242 + n},
                  env={"A": "1"}, command=f"# run 2026-h-{n}\nserve /{host}/models/target \\\n  --port {port} \\\n"
                                          f"  --steps {steps}\n")
        store.add(run)
        store.add(MetricRow(run_id=run.id, name="requests", value=16, source="orch"),
                  MetricRow(run_id=run.id, name="output_tok_s", value=tok_s, source="orch"))
        records.append(store.record(run))
        specs.append(store.get(str(run.id)).spec)
    found = diff.run_diff(records[0], records[1], (specs[0], specs[1]))
    shown = {(r.section, r.key) for r in found.shown()}
    assert shown == {("params", "steps"), ("effective_params", "steps"), ("metrics", "output_tok_s")}
    hidden = {(r.section, r.key): r.hidden for r in found.rows if r.hidden}
    assert hidden == {("params", "model_path"): diff.HOST_SPECIFIC, ("params", "port"): diff.HOST_SPECIFIC,
                      ("params", "gpus"): diff.HOST_SPECIFIC, ("effective_params", "tokenizer_path"): diff.HOST_SPECIFIC,
                      ("effective_params", "port"): diff.HOST_SPECIFIC, ("effective_params", "random_seed"): diff.HOST_SPECIFIC,
                      ("metrics", "requests"): diff.UNCHANGED}
    assert found.command_diff() == ["--- run 1", "+++ run 2", "-  --steps 3", "+  --steps 5"]
    assert found.hidden() == {"host_specific": 6 + 4, "unchanged": 1}  # 6 rows, 2 script lines each side
    assert found.hidden_text() == "10 host-specific and 1 unchanged lines hidden; --all shows them"
    data = found.as_json()  # the JSON says everything, as before, and counts what the view hides
    assert data["params"]["port"] == {"a": 31871, "b": 30412} and data["metrics"]["requests"]["delta"] == 0
    assert data["hidden"] == found.hidden() and len(data["command"]) == 8
    everything = diff.run_diff(records[0], records[1], (specs[0], specs[1]), everything=True)
    assert everything.shown() == everything.rows and ("params", "tp_size") not in shown
    assert {(r.section, r.key) for r in everything.shown()} >= set(hidden) | {("params", "model_path")}
    assert len(everything.command_diff()) == 8 and everything.hidden_text() == ""


def test_a_host_bound_value_is_a_whole_word_and_a_real_change_beside_it_shows():
    """Port 8000 is not inside 18000; a line that changes a host-bound value and something else is shown."""
    from orchestrator.core.hostbound import Values, same_but_where

    a, b = Values({"port": 8000}, {"port"}), Values({"port": 8001}, {"port"})
    assert same_but_where("--port 8000", "--port 8001", a, b)
    assert not same_but_where("--port 8000 --x 18000", "--port 8001 --x 18001", a, b)
    assert not same_but_where("--port 8000 --steps 3", "--port 8001 --steps 5", a, b)
