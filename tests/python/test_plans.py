"""modelmem.plan, modelmem.solve, modelmem.config, the exceptions and the package itself."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import modelmem
from conftest import CLI, PYTHONPATH, SHARED, SOURCE

MODELS = os.path.join(SOURCE, "models")


def shared_minimalloc(name):
    path = os.path.join(SHARED, "minimalloc", name)
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    return path


def test_every_public_name_is_documented():
    for name in modelmem.__all__:
        obj = getattr(modelmem, name)
        assert obj.__doc__, name
    assert "Plans the activation memory" in modelmem.plan.__doc__
    stubs = os.path.join(os.path.dirname(modelmem.__file__), "__init__.pyi")
    assert os.path.exists(stubs)


def test_exception_classes_are_standard_ones():
    assert issubclass(modelmem.ConfigError, ValueError)
    assert issubclass(modelmem.InvalidInputError, ValueError)
    assert issubclass(modelmem.OutOfMemoryError, MemoryError)
    assert issubclass(modelmem.QuotaExceededError, MemoryError)
    assert issubclass(modelmem.UnsupportedError, NotImplementedError)
    assert issubclass(modelmem.NpuAllocatorUnavailable, NotImplementedError)


def test_config_gives_every_effective_setting():
    c = modelmem.config("strategy:planned,huge_pages:True")
    assert c["strategy"] == "planned"
    assert c["huge_pages"] == "True"
    assert len(c) == len(modelmem.config_keys())
    assert modelmem.config("")["strategy"]


@pytest.mark.parametrize("text,key", [("no_such_key:1", "no_such_key"),
                                      ("strategy:bogus", "strategy"),
                                      ("static_pool_mb:-3", "static_pool_mb")])
def test_bad_config_raises_config_error_naming_the_key(text, key):
    with pytest.raises(modelmem.ConfigError) as e:
        modelmem.config(text)
    assert key in str(e.value)
    assert isinstance(e.value, ValueError)


def test_config_rejects_a_non_string():
    with pytest.raises(TypeError):
        modelmem.config(42)


def overlap(plan, buffers):
    for i, (si, ai, bi) in enumerate(buffers):
        for j, (sj, aj, bj) in enumerate(buffers):
            if i < j and ai < bj and aj < bi:
                oi, oj = plan.offsets[i], plan.offsets[j]
                if oi < oj + sj and oj < oi + si:
                    return True
    return False


def test_solve_a_list_keeps_input_order():
    buffers = [(100, 0, 2), (50, 1, 3), (100, 2, 4), (25, 0, 4)]
    p = modelmem.solve(buffers)
    assert len(p.offsets) == 4
    assert p.arena_bytes >= p.lower_bound == 175
    assert not overlap(p, buffers)
    assert [t.size for t in p.tensors] == [100, 50, 100, 25]
    assert p.tensors[0].first == 0 and p.tensors[0].last == 1
    assert "modelmem.Plan" in repr(p)
    exact = modelmem.solve(buffers, solver="exact", time_limit=5)
    assert exact.proven_optimal and exact.arena_bytes == 175


def test_solve_a_csv_file_and_write_json(tmp_path):
    p = modelmem.solve(os.path.join(SOURCE, "examples", "small.csv"), solver="greedy-size")
    assert p.arena_bytes > 0
    out = tmp_path / "plan.json"
    p.to_json(str(out))
    j = json.loads(out.read_text())
    assert j["arena_bytes"] == p.arena_bytes
    assert [b["offset"] for b in j["buffers"]] == p.offsets
    with pytest.raises(modelmem.UnsupportedError):
        p.to_html(str(tmp_path / "p.html"))


def test_solve_within_a_capacity_or_out_of_memory():
    buffers = [(100, 0, 2), (100, 1, 3)]
    assert modelmem.solve(buffers, capacity=200).arena_bytes == 200
    with pytest.raises(modelmem.OutOfMemoryError) as e:
        modelmem.solve(buffers, capacity=150)
    assert isinstance(e.value, MemoryError) and "capacity of 150" in str(e.value)


@pytest.mark.parametrize("problem,needle", [
    ([(0, 0, 1)], "size 0 must be positive"),
    ([(10, 2, 2)], "0 <= start < end"),
    ([(10, 1)], "expected a (size, start, end) tuple"),
    ([("10", 0, 1)], "expected a (size, start, end) tuple"),
    (42, "expected a CSV path"),
    ("/nonexistent/problem.csv", "/nonexistent/problem.csv"),
])
def test_solve_bad_problems(problem, needle):
    with pytest.raises(modelmem.InvalidInputError) as e:
        modelmem.solve(problem)
    assert needle in str(e.value)


def test_solve_bad_arguments():
    with pytest.raises(ValueError, match="unknown solver|no-such"):
        modelmem.solve([(1, 0, 1)], solver="no-such")
    with pytest.raises(ValueError, match="time_limit"):
        modelmem.solve([(1, 0, 1)], time_limit=0)
    with pytest.raises(ValueError, match="capacity"):
        modelmem.solve([(1, 0, 1)], capacity=0)


def test_plan_a_model(tmp_path):
    p = modelmem.plan(os.path.join(MODELS, "resnet50.onnx"), dims={"batch": 1}, time_limit=5)
    assert p.arena_bytes >= p.lower_bound > 0
    assert p.weights_bytes >= 0
    assert p.tensors and all(t.size > 0 and t.first <= t.last for t in p.tensors)
    assert isinstance(p.proven_optimal, bool)
    r = repr(p)
    assert "arena" in r and "lower bound" in r and len(r.splitlines()) < 25
    p.to_json(str(tmp_path / "plan.json"))
    assert json.loads((tmp_path / "plan.json").read_text())["arena_bytes"] == p.arena_bytes
    p.to_html(tmp_path / "plan.html")  # a pathlib.Path works as well as a str
    assert "<svg" in (tmp_path / "plan.html").read_text() or "<canvas" in (tmp_path / "plan.html").read_text()
    half = modelmem.plan(os.path.join(MODELS, "resnet50.onnx"), dims=["batch=1"], dtype="fp16",
                         order="memory", solver="greedy-size")
    assert half.arena_bytes < p.arena_bytes


def test_plan_buckets():
    p = modelmem.plan(os.path.join(MODELS, "bert_base.onnx"), dims={"batch": 1},
                      buckets={"seq": [32, 64]}, solver="greedy-size")
    assert [b.value for b in p.buckets] == [32, 64]
    assert p.buckets[0].arena_bytes < p.buckets[1].arena_bytes
    same = modelmem.plan(os.path.join(MODELS, "bert_base.onnx"), dims={"batch": 1},
                         buckets="seq=32,64", solver="greedy-size")
    assert [b.arena_bytes for b in same.buckets] == [b.arena_bytes for b in p.buckets]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(path="/nonexistent.onnx"), "/nonexistent.onnx"),
    (dict(dims={"batch": 0}), "positive"),
    (dict(dims="batch=1"), "dims"),
    (dict(dtype="int4"), "--dtype int4: expected fp32, fp16 or bf16"),
    (dict(order="random"), "order 'random'"),
    (dict(buckets=7), "buckets"),
    (dict(solver="nope"), "nope"),
    (dict(time_limit=-1), "--time-limit -1: must be a positive number of seconds"),
    # Python's big ints get the range, not pybind11's "Unable to cast Python instance".
    (dict(dims={"batch": 10**30}), "value must be a positive integer"),
    (dict(alignment=10**30), "--align 1000000000000000000000000000000 is out of range: "
                             "a power of two from 1 to 1048576 bytes"),
    (dict(alignment=3), "--align 3: out of range: a power of two from 1 to 1048576 bytes"),
])
def test_plan_bad_input(kwargs, needle):
    args = dict(path=os.path.join(MODELS, "resnet50.onnx"), dims={"batch": 1})
    args.update(kwargs)
    with pytest.raises(modelmem.InvalidInputError) as e:
        modelmem.plan(**args)
    assert needle in str(e.value)


def test_solver_names():
    names = modelmem.solver_names()
    assert "best" in names and "exact" in names


def test_a_long_solve_stops_on_ctrl_c():
    # MiniMalloc's D instance: the exact search does not finish within 120 s here.
    problem = shared_minimalloc("D.1048576.csv")
    code = f"""
import time
import modelmem
print("solving", flush=True)
t = time.time()
try:
    modelmem.solve({problem!r}, solver="exact", time_limit=120)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted after %.1f s" % (time.time() - t), flush=True)
"""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "solving"
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert out.startswith("interrupted after"), out
    assert float(out.split()[2]) < 15, out


def test_config_report_is_what_the_cli_prints():
    for text in ["strategy:caching,max_split_size_mb:64", "strategy:planned", ""]:
        cli = subprocess.run([CLI, "config", text], capture_output=True, text=True, check=True)
        assert modelmem.config_report(text) == cli.stdout
    assert "| `strategy` |" in subprocess.run([CLI, "config", "--keys"], capture_output=True,
                                              text=True, check=True).stdout
    with pytest.raises(modelmem.ConfigError, match="max_split_size_mb"):
        modelmem.config_report("max_split_size_mb:abc")


def test_a_plan_that_breaks_its_promise_is_refused_before_a_pool_is_built(tmp_path):
    plan = tmp_path / "overlap.json"
    plan.write_text(json.dumps({
        "format": "modelmem-plan", "version": 1, "arena_bytes": 1536, "weights_bytes": 0,
        "buffers": [{"id": "a", "size": 1024, "start": 0, "end": 2, "offset": 0},
                    {"id": "b", "size": 1024, "start": 1, "end": 3, "offset": 512}]}))
    with pytest.raises(modelmem.ConfigError, match=r"buffers 'a' \[0, 1024\) and 'b' \[512, 1536\) "
                                                   r"overlap in address while both live in \[1, 2\)"):
        modelmem.config_report(f"strategy:static,plan:{plan}")
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    for path, what in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        with pytest.raises(modelmem.ConfigError, match=f"is {what}, not a plan file"):
            modelmem.config_report(f"strategy:static,plan:{path}")


def test_info_lists_processes():
    procs = modelmem.info()
    assert isinstance(procs, list)
    for p in procs:
        assert {"pid", "process", "pools"} <= set(p)


def test_info_report_prints_what_the_cli_prints():
    table = modelmem.info_report(devices=False)
    assert table.startswith("modelmem info  ") and "\nhost: " in table
    report = json.loads(modelmem.info_report("json", devices=False))
    assert {"host", "devices", "processes", "stale", "notes"} <= set(report)
    cli = json.loads(subprocess.run([CLI, "info", "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert set(cli) >= set(report)  # the CLI also asks the accelerators ("npu")
    assert modelmem.info_report("prometheus", devices=False).startswith("# HELP modelmem_host")
    with pytest.raises(modelmem.InvalidInputError, match="info format 'yaml'"):
        modelmem.info_report("yaml")
