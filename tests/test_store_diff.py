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
