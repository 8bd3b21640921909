"""modelmem.plan(), fit() and plan_device() against `modelmem plan` on every bundled model: the
same figures field by field, the same JSON byte for byte (one writer: the library's renderers)
and the same report; bad input raises the CLI's one-line message. One CLI run per model and
kind, shared by the tests through module fixtures."""
import glob
import json
import os
import re
import subprocess

import pytest

from conftest import CLI, SOURCE, needs_torch, run_python

modelmem = pytest.importorskip("modelmem")

MODELS = os.path.join(SOURCE, "models")
# Every bundled model: the dims it needs, the dim fitted and the device it is fitted to, small
# enough that the search stays short (test_every_bundled_model_is_here).
CASES = {
    "bert_base": ({"batch": 1, "seq": 64}, "batch", "600MiB"),
    "gpt2_decoder": ({"batch": 1, "seq": 16, "past": 16, "total": 32}, "batch", "64MiB"),
    "resnet50": ({"batch": 2}, "batch", "256MiB"),
    "tiny": ({"n": 4}, "n", "6MiB"),
}
# The options of plan(): fp16 (the weights at 2 bytes), eager lifetimes, a strategy and overhead.
PLAN_KW = dict(dtype="fp16", runtime="eager", strategy="expandable", overhead="128MiB")
PLAN_FLAGS = ["--dtype", "fp16", "--runtime", "eager", "--strategy", "expandable",
              "--overhead", "128MiB"]
NOT_ATTRIBUTES = {"format", "version", "capacity_bytes", "buffers", "tensors", "steps"}


def path(stem):
    return os.path.join(MODELS, stem + ".onnx")


def dim_flags(dims):
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


def cli(*args, check=True):
    r = subprocess.run([CLI, "plan", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode in (0, 1), r.stderr
    return r


def without_json_line(text):
    return "".join(line for line in text.splitlines(True) if not line.startswith("json "))


def masked(text):
    """The report without its timings ("in 0.006 s", "12 plans in 0.31 s")."""
    return re.sub(r"\d+\.\d+ s\b", "T s", text)


def test_every_bundled_model_is_here():
    stems = {os.path.basename(p)[:-5] for p in glob.glob(os.path.join(MODELS, "*.onnx"))}
    assert stems == set(CASES), "a bundled model without a parity case: add it to CASES"


@pytest.fixture(scope="module")
def cli_plans(tmp_path_factory):
    """One `plan --json` per model: (stdout, the JSON text)."""
    out = {}
    for stem, (dims, _, _) in CASES.items():
        f = tmp_path_factory.mktemp("plan") / f"{stem}.json"
        r = cli(path(stem), *dim_flags(dims), *PLAN_FLAGS, "-o", str(f))
        assert r.returncode == 0, r.stderr
        out[stem] = (r.stdout, f.read_text())
    return out


@pytest.mark.parametrize("stem", sorted(CASES))
def test_plan_is_the_clis_plan_field_by_field(stem, cli_plans):
    stdout, text = cli_plans[stem]
    p = modelmem.plan(path(stem), dims=CASES[stem][0], **PLAN_KW)
    assert p.to_json() == text  # the same writer: byte for byte
    j = json.loads(text)
    assert p.to_dict() == j
    for key, value in j.items():
        if key not in NOT_ATTRIBUTES:
            assert getattr(p, key) == value, key
    assert (p.runtime, p.dtype, p.strategy) == ("eager", "fp16",
                                                "strategy:caching,expandable_segments:True")
    assert p.need_total_bytes == p.need_bytes + p.overhead_bytes == j["need_total_bytes"]
    assert [(t.name, t.size, t.offset, t.first, t.last) for t in p.tensors] == \
        [(t["name"], t["size"], t["offset"], t["first"], t["last"]) for t in j["tensors"]]
    assert p.offsets == [b["offset"] for b in j["buffers"]]
    assert masked(p.report()) == masked(without_json_line(stdout))


def test_dtype_applies_to_the_weights_as_in_the_cli():
    # Last round's finding: Python's fp16 weights_bytes was the fp32 figure.
    full = modelmem.plan(path("resnet50"), dims={"batch": 1}, solver="greedy-size")
    half = modelmem.plan(path("resnet50"), dims={"batch": 1}, dtype="fp16", solver="greedy-size")
    kept = modelmem.plan(path("resnet50"), dims={"batch": 1}, dtype="fp16",
                         keep_weights_dtype=True, solver="greedy-size")
    assert half.weights_bytes * 2 == full.weights_bytes == kept.weights_bytes
    assert half.dtype == "fp16" and full.dtype == "fp32"
    assert half.need_bytes < full.need_bytes


@pytest.fixture(scope="module")
def cli_fits(tmp_path_factory):
    """One `plan --fit DIM --json` per model, and bert's sequence (stopped by its table)."""
    out = {}
    for stem, (dims, dim, memory) in CASES.items():
        others = {k: v for k, v in dims.items() if k != dim}
        f = tmp_path_factory.mktemp("fit") / f"{stem}.json"
        r = cli(path(stem), *dim_flags(others), "--fit", dim, "--device-memory", memory,
                "--runtime", "eager", "--device-kind", "host", "-o", str(f))
        out[stem] = (others, dim, memory, r.returncode, r.stdout, f.read_text())
    f = tmp_path_factory.mktemp("fit") / "bert_seq.json"
    r = cli(path("bert_base"), "--dim", "batch=1", "--fit", "seq", "--device-memory", "80GiB",
            "-o", str(f))
    out["bert_seq"] = ({"batch": 1}, "seq", "80GiB", r.returncode, r.stdout, f.read_text())
    return out


def without_seconds(j):
    for f in ([j["fit"]] if "fit" in j else [e["fit"] for e in j["fit_each"]]):
        f.pop("seconds")
    return j


@pytest.mark.parametrize("case", sorted(CASES) + ["bert_seq"])
def test_fit_is_the_clis_fit(case, cli_fits):
    others, dim, memory, rc, stdout, text = cli_fits[case]
    stem = case if case in CASES else "bert_base"
    kw = dict(runtime="eager", device_kind="host") if case in CASES else {}
    f = modelmem.fit(path(stem), dim, memory, dims=others, **kw)
    j = json.loads(text)
    assert without_seconds(json.loads(f.to_json())) == without_seconds(json.loads(text))
    for key in ("dim", "value", "need_bytes", "next_need_bytes", "limit", "probes", "model",
                "checked_above", "not_monotone", "refused_below"):
        assert getattr(f, key) == j["fit"][key], key
    assert f.found == (rc == 0) == (f.value > 0)
    assert masked(f.report()) == masked(without_json_line(stdout))
    if f.found:
        assert f.need_bytes <= f.device.device_memory_bytes
        assert f.device.config == j["config"] and f.device.total_bytes == f.need_bytes
        modelmem.config(f.device.config)  # the string the run takes (MODELMEM_ALLOC_CONF)
    if case == "bert_seq":
        assert f.value == 512 and f.limit.startswith("model: table '") and "512 rows" in f.limit
    else:
        assert f.limit == "memory" and f.next_need_bytes > f.device.device_memory_bytes


def test_fit_where_nothing_fits_is_the_clis(tmp_path):
    r = cli(path("tiny"), "--fit", "n", "--device-memory", "1MiB", "-o", str(tmp_path / "n.json"))
    f = modelmem.fit(path("tiny"), "n", "1MiB")
    assert r.returncode == 1 and not f.found and f.value == 0 and f.device is None
    assert f.limit == "memory" and f.next_need_bytes > 1 << 20
    assert without_seconds(json.loads(f.to_json())) == \
        without_seconds(json.loads((tmp_path / "n.json").read_text()))
    assert masked(f.report()) == masked(without_json_line(r.stdout))


def test_fit_together_and_each_are_the_clis(tmp_path):
    models = [path("gpt2_decoder"), path("resnet50")]
    dims = {"seq": 16, "past": 16, "total": 32}
    args = [*models, *dim_flags(dims), "--fit", "batch", "--device-memory", "256MiB",
            "--device-kind", "host"]
    cli(*args, "-o", str(tmp_path / "t.json"))
    r = cli(*args, "--fit-each", "-o", str(tmp_path / "e.json"))
    together = modelmem.fit(models, "batch", "256MiB", dims=dims, device_kind="host")
    each = modelmem.fit(models, "batch", 256 << 20, dims=dims, device_kind="host", each=True)
    assert together.model is None and [e.model for e in each] == models
    assert without_seconds(json.loads(together.to_json())) == \
        without_seconds(json.loads((tmp_path / "t.json").read_text()))
    assert without_seconds(json.loads(each.to_json())) == \
        without_seconds(json.loads((tmp_path / "e.json").read_text()))
    assert masked(each.report()) == masked(without_json_line(r.stdout))
    assert min(e.value for e in each) >= together.value > 0
    assert [e.value for e in each] == [e.value for e in each.results] and len(each) == 2


def test_plan_device_is_the_clis(tmp_path):
    dims = {"batch": 1, "seq": 16, "past": 16, "total": 32, "n": 4}
    models = [path(s) for s in sorted(CASES)]
    f = tmp_path / "device.json"
    r = cli(*models, *dim_flags(dims), "--device-memory", "4GiB", "--runtime", "eager",
            "--dtype", "bf16", "-o", str(f))
    d = modelmem.plan_device(models, "4GiB", dims=dims, runtime="eager", dtype="bf16")
    text = f.read_text()
    assert d.to_json() == text
    j = json.loads(text)
    for key, value in j.items():
        attr = {"device_memory_bytes": "device_memory_bytes"}.get(key, key)
        assert getattr(d, attr) == value, key
    assert d.fits == (r.returncode == 0)
    assert d.configs == [m["config"] for m in j["models"]]
    assert d.report() == without_json_line(r.stdout)
    assert d.headroom_bytes == (4 << 30) - d.total_bytes
    # The journey: the one-process string is a configuration the runtime takes, a pool per model
    # with its quota in whole MiB.
    c = modelmem.config(d.config)
    assert c["pools"] and all(f"{m['pool']}:{m['quota_bytes'] >> 20}" in d.config
                              for m in d.models)


@needs_torch
def test_plan_devices_string_gives_each_pool_its_quota():
    # The journey: the one-process string goes to the allocator as it is; modelmem.pool(name)
    # finds each model's pool with the quota plan_device() printed (a fresh process: one CPU
    # allocator per process).
    r = run_python("""
import modelmem, modelmem.torch as mt
d = modelmem.plan_device([%r, %r], "1GiB", dims={"batch": 1, "n": 4}, device_kind="host")
h = mt.use_cpu_allocator(d.config)
for m in d.models:
    assert modelmem.pool(m["pool"]).quota == m["quota_bytes"] > 0, m
print("ok", d.config)
""" % (path("resnet50"), path("tiny")))
    assert r.returncode == 0 and r.stdout.startswith("ok pools:[resnet50:"), r.stdout + r.stderr


def test_solve_plan_json_is_the_clis(tmp_path):
    problem = os.path.join(SOURCE, "examples", "small.csv")
    subprocess.run([CLI, "solve", problem, "--solver", "greedy-size", "-o",
                    str(tmp_path / "p.json")], check=True, capture_output=True)
    p = modelmem.solve(problem, solver="greedy-size")
    assert p.to_json() == (tmp_path / "p.json").read_text()


BERT, TINY = path("bert_base"), path("tiny")
# (Python call, the same request to the CLI): the CLI's message, raised as InvalidInputError.
BAD = [
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, dtype="fp8"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--dtype", "fp8"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, runtime="lazy"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--runtime", "lazy"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, strategy="bogus"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--strategy", "bogus"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, strategy="pools:[a:1]"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--strategy", "pools:[a:1]"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, overhead="3x"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--overhead", "3x"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, overhead="5%"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--overhead", "5%"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, device_kind="tpu"),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--device-kind", "tpu"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 4096}),
     [BERT, "--dim", "batch=1", "--dim", "seq=4096"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 10**30, "seq": 64}),
     [BERT, "--dim", f"batch={10**30}", "--dim", "seq=64"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 0, "seq": 64}),
     [BERT, "--dim", "batch=0", "--dim", "seq=64"]),
    (lambda: modelmem.plan(BERT, dims={"batch": 1, "seq": 64}, safety=1000),
     [BERT, "--dim", "batch=1", "--dim", "seq=64", "--safety", "1000"]),
    (lambda: modelmem.plan(TINY, dims={"n": 1}, time_limit=-1),
     [TINY, "--dim", "n=1", "--time-limit", "-1"]),
    (lambda: modelmem.plan(TINY, dims={"n": 1}, keep_weights_dtype=True),
     [TINY, "--dim", "n=1", "--keep-weights-dtype"]),
    (lambda: modelmem.plan_device([TINY], 10**30, dims={"n": 1}),
     [TINY, "--dim", "n=1", "--device-memory", str(10**30)]),
    (lambda: modelmem.plan_device([TINY], "0", dims={"n": 1}),
     [TINY, "--dim", "n=1", "--device-memory", "0"]),
    (lambda: modelmem.plan_device([TINY], "16G", dims={"n": 1}),
     [TINY, "--dim", "n=1", "--device-memory", "16G"]),
    (lambda: modelmem.plan_device([TINY], "1GiB", dims={"n": 1}, overhead="150%"),
     [TINY, "--dim", "n=1", "--device-memory", "1GiB", "--overhead", "150%"]),
    (lambda: modelmem.fit(TINY, "n", "1GiB", dims={"n": 2}),
     [TINY, "--dim", "n=2", "--fit", "n", "--device-memory", "1GiB"]),
    (lambda: modelmem.fit(TINY, "batch", "1GiB"),
     [TINY, "--fit", "batch", "--device-memory", "1GiB"]),
    (lambda: modelmem.fit(TINY, "n", 10**30),
     [TINY, "--fit", "n", "--device-memory", str(10**30)]),
]


@pytest.mark.parametrize("call,args", BAD, ids=[" ".join(a[1:]) for _, a in BAD])
def test_bad_input_raises_the_clis_message(call, args):
    with pytest.raises(modelmem.InvalidInputError) as e:
        call()
    r = cli(*args, check=False)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr == f"modelmem: error: {e.value}\n"
    assert "\n" not in str(e.value)
