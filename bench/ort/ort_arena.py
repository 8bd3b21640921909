#!/usr/bin/env python3
"""ONNX Runtime's own activation memory against `modelmem plan`'s ideal arena and need.

Run with the project environment (.venv: torch 2.x, torchvision, onnxruntime), from the
repository root, after building (build/modelmem, build/integrations/preload/):

  ort_arena.py export MODEL OUT.onnx [SIZE [OPSET]]
      torchvision's MODEL with random weights (kept: ONNX Runtime runs it), eval mode, opset
      OPSET (13; `zoo` takes 14 for a model that needs it: SDPA in ViT), batch a symbolic dim `batch`, legacy exporter (dynamo=False), with PyTorch's
      multi-head-attention fast path off (ORT_ARENA_MHA_FASTPATH=1 keeps it: ViT then fails).

  ort_arena.py infer OUT.onnx BATCH SIZE SETTING[,SETTING...]
      for each SETTING, one ONNX Runtime session (one intra-op thread) and RUNS inferences;
      each session is opened by a SESSION marker request and each inference framed by MARK
      requests (sizes nothing else asks for). Run it under
      `modelmem run --trace T.csv --conf strategy:caching,preload_threshold_kb:1 -- ...`:
      every malloc of 1 KiB and more is in the trace.

  ort_arena.py measure T.csv SETTING[,SETTING...]
      per setting, per inference: the peak live bytes during the inference above the live
      bytes at the marker before it (arena chunks count when the arena asks malloc for them).

  ort_arena.py zoo [--models a,b] [--batches 1,8] [--size 224] [--out FILE]
      all of the above for each model and batch, beside `modelmem plan`'s ideal arena and its
      need on strategy:caching; prints a markdown table.

  ort_arena.py faults [--reps 10] [--steps 20] [--warmup 8] [--fault-settings default,arena=0]
                     [--out FILE]
      ResNet-50 batch 1 under ONNX Runtime (2 intra-op threads; each of --fault-settings:
      ORT's defaults and its CPU arena off) under plain glibc, `modelmem run` (its default:
      strategy:planned, automatic steps) and `modelmem run --conf
      strategy:planned,planned_steps:marked` with step marks (modelmem_step_begin/end through
      ctypes), ABAB interleaved: minor and major faults per steady step (getrusage in the
      child after warm-up), p50 and p99 latency; medians over repetitions with 95 % bootstrap
      intervals of their ratio to glibc; then what the planned arena saw (--report).

Settings (ORT's SessionOptions): `default` (optimisation ORT_ENABLE_ALL, memory patterns on,
CPU arena on, arena extension kNextPowerOfTwo), and `key=value` changes joined by `+`:
pattern=0, arena=0, extend=same (kSameAsRequested, by a shared env allocator), opt=none|basic|
extended|all.
"""
import argparse
import csv
import ctypes
import json
import math
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MARK_BYTES = 7_340_033      # odd, prime-sized: no tensor of these models has this size
SESSION_BYTES = 7_340_069   # another one, opening each setting's session
RUNS = 3                    # inferences per setting: the 1st records ORT's memory pattern
SETTINGS = ["default", "pattern=0", "arena=0", "pattern=0+arena=0", "extend=same",
            "opt=none+arena=0", "opt=basic+arena=0", "opt=extended+arena=0"]
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121",
          "squeezenet1_1", "swin_t", "vit_b_16"]


# ----------------------------------------------------------------------------- export

def export(name, out, size, opset=13):
    import torch
    import torchvision

    # nn.MultiheadAttention's inference fast path (aten::_native_multi_head_attention, taken
    # under no_grad in eval mode) has no ONNX symbolic: ViT fails to export with it.
    torch.backends.mha.set_fastpath_enabled(os.environ.get("ORT_ARENA_MHA_FASTPATH") == "1")
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        torch.onnx.export(model, (x,), out, opset_version=opset, input_names=["input"],
                          output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                          do_constant_folding=True, dynamo=False)


# ----------------------------------------------------------------------------- ORT side

def parse_setting(text):
    s = {"pattern": 1, "arena": 1, "extend": "pow2", "opt": "all"}
    if text != "default":
        for part in text.split("+"):
            key, _, value = part.partition("=")
            if key not in s:
                sys.exit(f"unknown setting {part!r}")
            s[key] = value if key in ("extend", "opt") else int(value)
    return s


def session(path, setting, threads=1):
    import onnxruntime as ort

    s = parse_setting(setting)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_mem_pattern = bool(s["pattern"])
    so.enable_cpu_mem_arena = bool(s["arena"])
    so.graph_optimization_level = {
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[s["opt"]]
    if s["extend"] == "same" and s["arena"]:
        # The CPU provider's own arena always extends by powers of two; kSameAsRequested
        # takes an arena registered in the environment and shared by the sessions using it.
        if not getattr(session, "env_arena", False):
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                     ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(
                {"max_mem": 0, "arena_extend_strategy": 1, "initial_chunk_size_bytes": -1,
                 "max_dead_bytes_per_chunk": -1}))
            session.env_arena = True
        so.add_session_config_entry("session.use_env_allocators", "1")
    elif s["extend"] != "pow2":
        sys.exit(f"extend={s['extend']}: pow2 or same")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def mark(nbytes):
    libc = ctypes.CDLL(None)  # the preloaded malloc, when there is one
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(nbytes))


def infer(path, batch, size, settings):
    import gc

    import numpy as np

    x = np.random.default_rng(0).standard_normal((batch, 3, size, size), dtype=np.float32)
    for setting in settings:
        mark(SESSION_BYTES)
        sess = session(path, setting)
        for _ in range(RUNS):
            mark(MARK_BYTES)
            y = sess.run(None, {"input": x})
            del y
        mark(MARK_BYTES)
        del sess
        gc.collect()


def measure(path, settings):
    """Per setting, from a trace: `runs`, the peak live bytes during each inference above the
    live bytes at its start; `all`, the peak during the inferences above the level before the
    first (what ORT's arena keeps after growing in any of them); `held`, what the session holds
    after it is made (weights as ORT keeps them) above the level before; `session`, the peak of
    the session's life above that level (the parsed model while it loads included)."""
    live, current = {}, 0
    result, cur = {}, None
    level = peak = None
    with open(path, newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            event = row["event"]
            if event == "alloc":
                nbytes = int(row["size"])
                if nbytes == SESSION_BYTES:
                    if len(result) == len(settings):
                        sys.exit(f"{path}: more sessions than the {len(settings)} settings")
                    cur = result[settings[len(result)]] = {
                        "runs": [], "base": current, "session": 0, "first": None, "all": 0}
                    level = None
                    continue
                if nbytes == MARK_BYTES:
                    if level is not None:
                        cur["runs"].append(peak - level)
                    else:
                        cur["first"] = current
                        cur["held"] = current - cur["base"]
                    level = peak = current
                    continue
                live[row["address"]] = nbytes
                current += nbytes
                if cur is not None:
                    cur["session"] = max(cur["session"], current - cur["base"])
                    if level is not None:
                        peak = max(peak, current)
                        cur["all"] = max(cur["all"], current - cur["first"])
            elif event == "free":
                current -= live.pop(row["address"], 0)
    if len(result) != len(settings) or any(len(v["runs"]) != RUNS for v in result.values()):
        sys.exit(f"{path}: markers for {len(result)} of {len(settings)} settings "
                 f"({ {s: len(v['runs']) for s, v in result.items()} } inferences)")
    return result


# ----------------------------------------------------------------------------- zoo

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def plan_figures(build, onnx_path, batch):
    out = run([os.path.join(build, "modelmem"), "plan", onnx_path, "--dim", f"batch={batch}"]
              ).stdout
    ideal = int(re.search(r"^ideal arena\s+([\d,]+) B", out, re.M).group(1).replace(",", ""))
    weights = int(re.search(r"^weights\s+([\d,]+) B", out, re.M).group(1).replace(",", ""))
    need = int(re.search(r"^need\s+([\d,]+) B", out, re.M).group(1).replace(",", ""))
    return ideal, weights, need


def mib(n):
    return f"{n / 2**20:.2f}"


def zoo(args):
    build = os.path.abspath(args.build)
    os.makedirs(args.tmp, exist_ok=True)
    py = sys.executable
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
        f"input {args.size}x{args.size}; ORT 1 intra-op thread")
    settings = args.settings.split(",")
    say()
    say("Activations: MiB that ORT's session takes over its first three inferences (peak live "
        "above the level before the first; the input counted, as plan counts it), and in "
        "brackets that over plan's ideal arena; steady: the 3rd inference alone (ORT records "
        "its memory pattern in the 1st and uses it from the 2nd).")
    say()
    say("| model | b | ideal | " + " | ".join(settings) + " | steady, arena=0 |")
    say("|---|---|---|" + "---|" * len(settings) + "---|")
    whole = []
    for name in args.models.split(","):
        onnx_path = os.path.join(args.tmp, f"{name}_{args.size}.onnx")
        label = name
        if os.path.exists(onnx_path + ".opset"):  # exported at another opset by an earlier run
            with open(onnx_path + ".opset") as f:
                label = f"{name} (opset {f.read().strip()})"
        if not os.path.exists(onnx_path):
            err = None
            for opset in (13, 14):
                try:
                    run([py, __file__, "export", name, onnx_path, str(args.size), str(opset)])
                    if opset != 13:
                        label = f"{name} (opset {opset})"
                        with open(onnx_path + ".opset", "w") as f:
                            f.write(f"{opset}\n")
                    err = None
                    break
                except subprocess.CalledProcessError as e:
                    err = [ln for ln in (e.stderr or "").strip().splitlines() if ln.strip()]
                    err = err[-1][:200] if err else str(e)
            if err:
                say(f"| {name} | - | export failed: {err} |")
                continue
        for batch in [int(b) for b in args.batches.split(",")]:
            ideal, weights, need = plan_figures(build, onnx_path, batch)
            trace = os.path.join(args.tmp, f"{name}_{args.size}_b{batch}.csv")
            try:
                run([os.path.join(build, "modelmem"), "run", "--trace", trace, "--conf",
                     "strategy:caching,preload_threshold_kb:1", "--", py, __file__, "infer",
                     onnx_path, str(batch), str(args.size), ",".join(settings)])
            except subprocess.CalledProcessError as e:
                err = [ln for ln in (e.stderr or "").strip().splitlines() if ln.strip()]
                say(f"| {label} | {batch} | ORT failed: {err[-1][:200] if err else e} |")
                continue
            m = measure(trace, settings)
            os.unlink(trace)
            inp = batch * 3 * args.size * args.size * 4
            cells = [f"{mib(m[s]['all'] + inp)} ({(m[s]['all'] + inp) / ideal:.2f})"
                     for s in settings]
            steady = "-"
            if "arena=0" in m:
                v = m["arena=0"]["runs"][-1] + inp
                steady = f"{mib(v)} ({v / ideal:.2f})"
            say(f"| {label} | {batch} | {mib(ideal)} | " + " | ".join(cells) + f" | {steady} |")
            d = m[settings[0]]
            whole.append(f"| {label} | {batch} | {mib(weights)} | {mib(need)} | {mib(d['held'])} "
                         f"| {mib(d['held'] + d['all'] + inp)} "
                         f"({(d['held'] + d['all'] + inp) / need:.2f}) | {mib(d['session'])} |")
    say()
    say(f"The whole model, {settings[0]} setting (MiB): plan's weights and need (weights and 3 "
        "inferences on strategy:caching, what `modelmem run` reserves); what ORT's session "
        "holds once made (weights as ORT keeps them: initializers, pre-packed copies), that "
        "plus its activations (over the need), and the peak of the session's life (the parsed "
        "model while it loads).")
    say()
    say("| model | b | weights | need | ORT held | ORT held + activations | ORT session peak |")
    say("|---|---|---|---|---|---|---|")
    for line in whole:
        say(line)
    say()
    say(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- faults

def fault_worker(path, steps, warmup, marks, setting):
    import numpy as np

    sess = session(path, setting, threads=2)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    lib = ctypes.CDLL(None)
    begin = getattr(lib, "modelmem_step_begin", None) if marks else None
    end = getattr(lib, "modelmem_step_end", None) if marks else None

    def step():
        if begin:
            begin()
        sess.run(None, {"input": x})
        if end:
            end()

    for _ in range(warmup):
        step()
    lat = []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        t = time.perf_counter_ns()
        step()
        lat.append(time.perf_counter_ns() - t)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"lat_ns": lat, "minflt": (r1.ru_minflt - r0.ru_minflt) / steps,
                      "majflt": (r1.ru_majflt - r0.ru_majflt) / steps}))


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def boot_ratio(a, b, reps=2000):
    """Median of per-repetition ratios a[i]/b[i] with a 95 % bootstrap interval."""
    r = [x / y for x, y in zip(a, b)]
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choice(r) for _ in r) for _ in range(reps))
    return statistics.median(r), meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def faults(args):
    build = os.path.abspath(args.build)
    os.makedirs(args.tmp, exist_ok=True)
    onnx_path = os.path.join(args.tmp, "resnet50_224.onnx")
    if not os.path.exists(onnx_path):
        run([sys.executable, __file__, "export", "resnet50", onnx_path, "224"])
    mm = os.path.join(build, "modelmem")
    worker = [sys.executable, __file__, "fault-worker", onnx_path, str(args.steps),
              str(args.warmup)]
    # `modelmem run` alone is strategy:planned with steps found from the request pattern; the
    # marked one calls modelmem_step_begin/end around each session.run. ORT's default keeps its
    # own arena (its steady steps ask malloc for nothing large); with arena=0 every step asks
    # malloc for its memory-pattern block, the output and the kernels' scratch.
    configs = []
    for setting in args.fault_settings.split(","):
        configs += [
            (f"{setting}: glibc", worker + ["0", setting]),
            (f"{setting}: modelmem run (planned, auto steps)",
             [mm, "run", "--"] + worker + ["0", setting]),
            (f"{setting}: modelmem run planned, marked steps",
             [mm, "run", "--conf", "strategy:planned,planned_steps:marked", "--"]
             + worker + ["1", setting])]
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
        f"ResNet-50 b1, 2 intra-op threads; {args.reps} repetitions "
        f"(ABAB: every configuration once per repetition, order rotated), {args.warmup} "
        f"warm-up + {args.steps} timed steps each")
    res = {label: [] for label, _ in configs}
    for rep in range(args.reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for label, cmd in order:
            out = run(cmd).stdout.strip().splitlines()[-1]
            res[label].append(json.loads(out))
    say()
    say("| configuration | minor faults/step | major faults/step | p50 ms | p99 ms | "
        "p50 / glibc (95 % CI) | p99 / glibc (95 % CI) |")
    say("|---|---|---|---|---|---|---|")
    for label, _ in configs:
        r = res[label]
        base = res[label.split(":")[0] + ": glibc"]
        p50 = [pct(x["lat_ns"], 50) / 1e6 for x in r]
        p99 = [pct(x["lat_ns"], 99) / 1e6 for x in r]
        b50 = [pct(x["lat_ns"], 50) / 1e6 for x in base]
        b99 = [pct(x["lat_ns"], 99) / 1e6 for x in base]
        c50, c99 = boot_ratio(p50, b50), boot_ratio(p99, b99)
        say(f"| {label} | {statistics.median(x['minflt'] for x in r):.1f} | "
            f"{statistics.median(x['majflt'] for x in r):.2f} | {statistics.median(p50):.1f} | "
            f"{statistics.median(p99):.1f} | {c50[0]:.3f} ({c50[1]:.3f}-{c50[2]:.3f}) | "
            f"{c99[0]:.3f} ({c99[1]:.3f}-{c99[2]:.3f}) |")
    say()
    say("What the planned arena saw (one more run of each, `modelmem run --report`):")
    say()
    for label, cmd in configs:
        if "modelmem" not in label:
            continue
        r = run(cmd[:2] + ["--report"] + cmd[2:])
        keep = [" ".join(ln.split()) for ln in r.stderr.splitlines()
                if re.match(r"\s+(large requests|steps|steps planned|no plan|hits|misses|"
                            r"arena size|peak live)\b", ln)]
        say(f"- {label}: " + "; ".join(keep))
    say()
    say(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    argv = sys.argv[1:]
    if len(argv) >= 3 and argv[0] == "export":
        export(argv[1], argv[2], int(argv[3]) if len(argv) > 3 else 224,
               int(argv[4]) if len(argv) > 4 else 13)
    elif len(argv) == 5 and argv[0] == "infer":
        infer(argv[1], int(argv[2]), int(argv[3]), argv[4].split(","))
    elif len(argv) == 3 and argv[0] == "measure":
        for s, v in measure(argv[1], argv[2].split(",")).items():
            print(s, *v["runs"], v["all"], v["held"], v["session"])
    elif len(argv) == 6 and argv[0] == "fault-worker":
        fault_worker(argv[1], int(argv[2]), int(argv[3]), argv[4] == "1", argv[5])
    elif argv and argv[0] in ("zoo", "faults"):
        ap = argparse.ArgumentParser(prog=f"ort_arena.py {argv[0]}")
        ap.add_argument("--build", default=os.path.join(ROOT, "build"))
        ap.add_argument("--tmp", default=os.path.join(HERE, ".work"))
        ap.add_argument("--out")
        ap.add_argument("--models", default=",".join(MODELS))
        ap.add_argument("--batches", default="1,8")
        ap.add_argument("--size", type=int, default=224)
        ap.add_argument("--settings", default=",".join(SETTINGS))
        ap.add_argument("--reps", type=int, default=10)
        ap.add_argument("--steps", type=int, default=20)
        ap.add_argument("--warmup", type=int, default=8)
        ap.add_argument("--fault-settings", default="default,arena=0")
        args = ap.parse_args(argv[1:])
        (zoo if argv[0] == "zoo" else faults)(args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
