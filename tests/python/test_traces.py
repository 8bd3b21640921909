"""modelmem.Trace on the shared PyTorch traces and on memory snapshots; the CLI on snapshots."""
import json
import os

import pytest

import modelmem
from conftest import SOURCE, run_cli, shared_trace


def test_load_analyze_replay_export_a_shared_trace(tmp_path):
    t = modelmem.Trace.load(shared_trace("torch_resnet50.events.csv"))
    assert len(t) > 1000 and "Trace" in repr(t)
    a = t.analyze()
    assert a.summary["allocs"] > 0 and a.summary["peak_live"] > 0
    assert a.steps and a.steps[0].allocs > 0 and a.steps[0].end > a.steps[0].begin
    assert a.advice and all(x.topic and x.message for x in a.advice)
    assert any(x.config for x in a.advice)
    assert "peak" in str(a)
    # One serialisation: the summary is the CLI's, device_events and static_pool_bytes included.
    assert a.summary == a.to_dict()["summary"]
    for key in ("device_events", "peak_live_event", "static_pool_bytes", "histogram"):
        assert key in a.summary, key
    r = t.replay("strategy:caching")
    assert r["allocs"] == a.summary["allocs"] and r["peak_reserved"] >= r["peak_live"] > 0
    planned = t.replay("strategy:planned", repeat=2)
    assert planned["allocs"] == 2 * a.summary["allocs"]
    t.to_perfetto(str(tmp_path / "t.json"))
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    t.to_html(tmp_path / "t.html")
    assert "modelmem trace" in (tmp_path / "t.html").read_text()
    t.save(str(tmp_path / "t.csv"))
    assert len(modelmem.Trace.load(str(tmp_path / "t.csv"))) == len(t)


def test_to_dict_is_what_analyze_json_prints():
    path = shared_trace("torch_resnet50.events.csv")
    cli = json.loads(run_cli("analyze", path, "--json").stdout)
    mine = modelmem.Trace.load(path).analyze().to_dict()
    assert "sites" in mine and mine == cli


def test_mindspore_tracker_file_gives_set_memory():
    # examples/ascend/memory_block.csv: a made-up run in MindSpore's memory tracker layout.
    t = modelmem.Trace.load(os.path.join(SOURCE, "examples", "ascend", "memory_block.csv"))
    a = t.analyze()
    assert a.summary["peak_live"] == 18 << 20
    pool = [x for x in a.advice if x.topic == "static-pool"][0]
    assert pool.config == "strategy:static,static_pool_mb:20"
    assert pool.mindspore == ('mindspore.runtime.set_memory(init_size="0.017578125GB", '
                              'increase_size="0.001953125GB", max_size="0.01953125GB")')
    assert a.to_dict()["advice"][-1]["mindspore"] == pool.mindspore
    assert all(not x.mindspore for x in a.advice if x.topic != "static-pool")


def test_trace_bad_input(tmp_path):
    with pytest.raises(modelmem.InvalidInputError, match="no such trace file"):
        modelmem.Trace.load("/nonexistent/trace.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a trace"):
        modelmem.Trace.load(str(bad))
    # A model where a trace belongs: a message that says so (it used to be empty), no raw bytes.
    with pytest.raises(modelmem.InvalidInputError, match="not a trace: binary data") as e:
        modelmem.Trace.load(os.path.join(SOURCE, "models", "tiny.onnx"))
    assert str(e.value).isprintable()
    lines = tmp_path / "lines.csv"
    lines.write_text("event,time_ns,address,size\nalloc,1,0x10,64\nbogus,2,0x10,64\n")
    assert modelmem.Trace.load(str(lines), skip_bad=True).warnings
    with pytest.raises(ValueError, match="unknown event"):
        modelmem.Trace.load(str(lines))
    t = modelmem.Trace.load(str(lines), skip_bad=True)
    with pytest.raises(modelmem.ConfigError):
        t.replay("strategy:nope")
    with pytest.raises(ValueError, match="repeat"):
        t.replay("", repeat=0)
    # A big int gets the range (pybind11 refused it as "incompatible function arguments").
    with pytest.raises(modelmem.InvalidInputError,
                       match=r"^repeat 1000000000000000000000000000000 is out of range: "
                             r"from 1 to 10000 replays$"):
        t.replay("", repeat=10**30)
    with pytest.raises(ValueError, match="time_limit"):
        t.analyze(time_limit=0)
    with pytest.raises(ValueError, match="cannot open"):
        t.to_html("/nonexistent/dir/x.html")
    with pytest.raises(ValueError, match="cannot open"):
        t.to_perfetto("/nonexistent/dir/x.json")


def test_snapshot_gives_sites_reserved_memory_and_advice(snapshots, tmp_path):
    t = modelmem.Trace.load(str(snapshots / "cuda_p4.pickle"))
    a = t.analyze()
    assert a.summary["peak_live"] == 13 << 20
    assert a.summary["peak_reserved"] == 22 << 20
    assert a.summary["ooms"] == 1
    assert a.sites[0].site == "model.py:13 forward" and a.sites[0].bytes == 24 << 20
    assert "allocation sites" in str(a)
    t.to_html(str(tmp_path / "s.html"))
    assert "model.py:13 forward" in (tmp_path / "s.html").read_text()
    npu = modelmem.Trace.load(str(snapshots / "npu.pickle"))
    assert any("time_us" in w for w in npu.warnings)


def test_a_snapshot_with_code_is_refused_and_not_run(snapshots):
    with pytest.raises(modelmem.InvalidInputError) as e:
        modelmem.Trace.load(str(snapshots / "evil.pickle"))
    assert "pickle byte 64: opcode STACK_GLOBAL refused" in str(e.value)
    assert not (snapshots / "pwned").exists()
    with pytest.raises(ValueError, match="truncated"):
        modelmem.Trace.load(str(snapshots / "truncated.pickle"))


def test_cli_reads_snapshots(snapshots, tmp_path):
    snap = str(snapshots / "cuda_p2.pickle")
    r = run_cli("analyze", snap)
    assert r.returncode == 0, r.stderr
    assert "allocation sites" in r.stdout and "model.py:13 forward" in r.stdout
    j = run_cli("analyze", "--json", snap)
    assert json.loads(j.stdout)["sites"][0]["site"] == "model.py:13 forward"
    r = run_cli("replay", snap)
    assert r.returncode == 0, r.stderr
    html = str(tmp_path / "v.html")
    assert run_cli("viz", snap, "-o", html).returncode == 0
    assert "model.py:12 forward" in open(html).read()
    csv = str(tmp_path / "s.csv")
    assert run_cli("trace", snap, "-o", csv).returncode == 0
    assert "model.py:13 forward" in open(csv).read()
    bad = run_cli("analyze", str(snapshots / "evil.pickle"))
    assert bad.returncode == 2 and "opcode STACK_GLOBAL refused" in bad.stderr
