#!/usr/bin/python3
"""End-to-end inference benchmark of heap allocators on PyTorch eager (CPU).

Runs ResNet-50 (batch 1 and 8) and a BERT-base encoder (batch 1, seq 128) with random weights
under glibc malloc, jemalloc, tcmalloc, mimalloc (Debian's libraries by LD_PRELOAD), modelmem
caching and modelmem planned arena (libmodelmem_preload.so), and the same models exported to
ONNX under onnxruntime-node as a reference. One worker process per configuration stays alive
for a model; the coordinator asks each in turn for a chunk of timed inferences, rotating the
order every round, so machine drift hits every configuration alike.

Usage (from the repository root, after building):
  /usr/bin/python3 bench/e2e/bench.py --build build [--budget 840] [--out results.md]
"""

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "/usr/lib/x86_64-linux-gnu"
THREADS = 2

MODELS = {
    # name: (kind, batch, warm-up inferences, chunk size)
    "resnet50_b1": ("resnet50", 1, 12, 10),
    "resnet50_b8": ("resnet50", 8, 8, 4),
    "bert_b1_s128": ("bert", 1, 12, 10),
}

# ----------------------------------------------------------------------------- models


def build_model(kind):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if kind == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None).eval()

    class Layer(nn.Module):
        def __init__(self, d, h, ff):
            super().__init__()
            self.h, self.dh = h, d // h
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d)
            self.ff1 = nn.Linear(d, ff)
            self.ff2 = nn.Linear(ff, d)
            self.ln2 = nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = self.ln1(x + self.out(y))
            return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))

    class Encoder(nn.Module):
        """BERT-base shaped: 12 layers, hidden 768, 12 heads, FFN 3072, 30522-word vocabulary."""

        def __init__(self, vocab=30522, d=768, h=12, ff=3072, layers=12, max_len=512):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList([Layer(d, h, ff) for _ in range(layers)])

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.ln(self.emb(ids) + self.pos(pos))
            for layer in self.layers:
                x = layer(x)
            return x

    return Encoder().eval()


def model_input(kind, batch):
    import torch

    torch.manual_seed(1)
    if kind == "resnet50":
        return torch.randn(batch, 3, 224, 224)
    return torch.randint(0, 30522, (batch, 128), dtype=torch.int64)


def export_onnx(name, path):
    import torch

    kind, batch, _, _ = MODELS[name]
    model = build_model(kind)
    x = model_input(kind, batch)
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                          opset_version=13)


# ----------------------------------------------------------------------------- worker


def worker(name):
    """Line protocol on stdin/stdout: `run K` -> {"lat_ns": [...], "minflt": N};
    `mark` -> one getppid() call (a marker for strace); `quit` -> {"maxrss_kb": N}."""
    import torch

    torch.set_num_threads(THREADS)
    kind, batch, warmup, _ = MODELS[name]
    warmup = int(os.environ.get("BENCH_WARMUP", warmup))
    model = build_model(kind)
    x = model_input(kind, batch)
    out = sys.stdout
    with torch.inference_mode():
        t0 = time.perf_counter()
        for _ in range(warmup):
            model(x)
        warm_s = time.perf_counter() - t0
        out.write(json.dumps({"ready": True, "warmup_s": warm_s}) + "\n")
        out.flush()
        for line in sys.stdin:
            cmd = line.split()
            if not cmd:
                continue
            if cmd[0] == "run":
                k = int(cmd[1])
                lat = []
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                for _ in range(k):
                    t = time.perf_counter_ns()
                    model(x)
                    lat.append(time.perf_counter_ns() - t)
                f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                out.write(json.dumps({"lat_ns": lat, "minflt": f1 - f0}) + "\n")
            elif cmd[0] == "mark":
                os.getppid()
                out.write(json.dumps({"marked": True}) + "\n")
            elif cmd[0] == "quit":
                ru = resource.getrusage(resource.RUSAGE_SELF)
                out.write(json.dumps({"maxrss_kb": ru.ru_maxrss}) + "\n")
                out.flush()
                return
            out.flush()


# ----------------------------------------------------------------------------- coordinator


def configs(build):
    preload = os.path.join(build, "integrations", "preload", "libmodelmem_preload.so")
    return [
        ("glibc", {}),
        ("jemalloc", {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2"}),
        ("tcmalloc", {"LD_PRELOAD": f"{LIB}/libtcmalloc_minimal.so.4"}),
        ("mimalloc", {"LD_PRELOAD": f"{LIB}/libmimalloc.so.2"}),
        ("modelmem-caching",
         {"LD_PRELOAD": preload, "MODELMEM_ALLOC_CONF": "strategy:caching",
          "MODELMEM_REPORT": "1"}),
        ("modelmem-planned",
         {"LD_PRELOAD": preload, "MODELMEM_ALLOC_CONF": "strategy:planned",
          "MODELMEM_REPORT": "1"}),
    ]


PEERS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")


class Worker:
    def __init__(self, label, argv, env, stderr_path):
        self.label = label
        self.err = open(stderr_path, "w")
        full_env = dict(os.environ)
        # Passive OpenMP waiting: on a machine shared with other jobs, spinning threads of a
        # 2-thread pool slow every inference several-fold (measured: 7.2 s against 1.2 s for
        # the encoder with 2 threads). The same setting for every configuration.
        full_env.update({"OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "PASSIVE"})
        full_env.update(env)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=full_env, text=True, bufsize=1)
        self.lat = []
        self.minflt = 0
        self.maxrss_kb = None
        self.warmup_s = None

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: worker died (see {self.err.name})")
        return json.loads(line)

    def ready(self):
        self.warmup_s = self.read()["warmup_s"]

    def run(self, k):
        self.proc.stdin.write(f"run {k}\n")
        self.proc.stdin.flush()
        r = self.read()
        self.lat += r["lat_ns"]
        self.minflt += r["minflt"]

    def quit(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.maxrss_kb = self.read()["maxrss_kb"]
        self.proc.wait()
        self.err.close()


def pct(sorted_vals, p):
    i = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[i]


def summary(w):
    s = sorted(w.lat)
    n = len(s)
    p50 = pct(s, 50) / 1e6
    return {
        "n": n, "p50": p50, "p90": pct(s, 90) / 1e6, "p99": pct(s, 99) / 1e6,
        "max": s[-1] / 1e6, "jitter": pct(s, 99) / pct(s, 50),
        "throughput": n * 1e9 / sum(s) * MODELS[w.model][1],
        "rss_mib": w.maxrss_kb / 1024, "minflt": w.minflt / n,
    }


def syscall_count(build, name, label, env, tmp, inferences):
    """OS memory calls per steady-state inference, counted with strace between two markers."""
    trace = os.path.join(tmp, f"strace_{name}_{label}.txt")
    argv = ["strace", "-f", "-qq", "-e", "trace=mmap,munmap,brk,mremap,madvise,getppid", "-o",
            trace, sys.executable, os.path.abspath(__file__), "--worker", name]
    w = Worker(label, argv, env, os.path.join(tmp, f"strace_{name}_{label}.err"))
    w.model = name
    w.ready()
    w.run(2)
    for cmd in ("mark", f"run {inferences}", "mark"):
        w.proc.stdin.write(cmd + "\n")
        w.proc.stdin.flush()
        w.read()
    w.quit()
    call = re.compile(r"^\d+\s+(mmap|munmap|brk|mremap|madvise)\(")
    calls, marks = 0, 0
    with open(trace) as f:
        for line in f:
            if "getppid(" in line and "resumed" not in line:
                marks += 1
            elif marks == 1 and call.match(line):
                calls += 1
    return calls / inferences


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--build", default="build")
    ap.add_argument("--budget", type=float, default=840.0,
                    help="seconds of timed inference for the whole run (default 840)")
    ap.add_argument("--min-n", type=int, default=200)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", help="comma-separated subset of the configurations (smoke tests)")
    ap.add_argument("--warmup", type=int, help="warm-up inferences (default: per model)")
    ap.add_argument("--tmp", default=os.path.join(HERE, ".work"))
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return

    os.makedirs(args.tmp, exist_ok=True)
    models = args.models.split(",")
    cfgs = configs(os.path.abspath(args.build))
    if args.configs:
        cfgs = [c for c in cfgs if c[0] in args.configs.split(",")]
    if args.warmup is not None:
        os.environ["BENCH_WARMUP"] = str(args.warmup)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at start: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
        f"{THREADS} intra-op threads")
    start = time.time()
    per_model_budget = args.budget / len(models)
    for name in models:
        kind, batch, warmup, chunk = MODELS[name]
        warmup = args.warmup if args.warmup is not None else warmup
        say()
        say(f"## {name}")
        workers = []
        for label, env in cfgs:
            argv = [sys.executable, os.path.abspath(__file__), "--worker", name]
            w = Worker(label, argv, env, os.path.join(args.tmp, f"{name}_{label}.err"))
            w.model = name
            workers.append(w)
        if not args.no_ort:
            onnx_path = os.path.join(args.tmp, f"{name}.onnx")
            if not os.path.exists(onnx_path):
                export_onnx(name, onnx_path)
            argv = ["node", os.path.join(HERE, "ort_worker.js"), onnx_path, kind, str(batch),
                    str(THREADS), str(warmup)]
            w = Worker("onnxruntime-node", argv, {}, os.path.join(args.tmp, f"{name}_ort.err"))
            w.model = name
            workers.append(w)
        # Workers build and warm up at the same time; nothing is timed before all are ready.
        for w in workers:
            w.ready()
        # One round (a chunk for each configuration) tells the time per inference; the count is
        # then what the budget allows, at least --min-n, fewer only when one round is too slow.
        for w in workers:
            w.run(chunk)
        per_inference = sum(sum(w.lat) for w in workers) / 1e9 / (chunk * len(workers))
        n_target = max(args.min_n, chunk)
        allowed = int(per_model_budget / (per_inference * len(workers)))
        if allowed < n_target:
            reduced = max(allowed, chunk)
            say(f"NOTE: {reduced} timed inferences per configuration instead of {n_target} "
                f"(the budget of {per_model_budget:.0f} s for this model allows no more at "
                f"{per_inference * 1000:.0f} ms per inference)")
            n_target = reduced
        rounds = 0
        while min(len(w.lat) for w in workers) < n_target:
            order = workers[rounds % len(workers):] + workers[:rounds % len(workers)]
            for w in order:
                if len(w.lat) < n_target:
                    w.run(min(chunk, n_target - len(w.lat)))
            rounds += 1
        for w in workers:
            w.quit()
        stats = {w.label: summary(w) for w in workers}
        peers = [p for p in PEERS if p in stats] or list(stats)
        best_p50 = min(stats[p]["p50"] for p in peers)
        best_rss = min(stats[p]["rss_mib"] for p in peers)
        say(f"{min(s['n'] for s in stats.values())} timed inferences per configuration after {warmup} warm-up, "
            f"chunks of {chunk}, {rounds + 1} interleaved rounds")
        say()
        say("| configuration | p50 ms | p90 ms | p99 ms | max ms | p99/p50 | inf/s | "
            "peak RSS MiB | minor faults/inf | p50 / best peer | RSS / best peer |")
        say("|---|---|---|---|---|---|---|---|---|---|---|")
        for w in workers:
            s = stats[w.label]
            say(f"| {w.label} | {s['p50']:.1f} | {s['p90']:.1f} | {s['p99']:.1f} | "
                f"{s['max']:.1f} | {s['jitter']:.3f} | {s['throughput']:.2f} | "
                f"{s['rss_mib']:.0f} | {s['minflt']:.1f} | {s['p50'] / best_p50:.3f} | "
                f"{s['rss_mib'] / best_rss:.3f} |")
        for w in workers:
            if w.label.startswith("modelmem"):
                with open(w.err.name) as f:
                    report = f.read().strip()
                if report:
                    say()
                    say(f"{w.label} report:")
                    say("```")
                    for line in report.splitlines():
                        say(line)
                    say("```")
    if not args.no_strace:
        say()
        say("## OS memory calls per steady-state inference (strace: mmap, munmap, brk, mremap, "
            "madvise between two markers; ResNet-50 batch 1, 10 inferences after warm-up)")
        say()
        say("| configuration | calls/inference |")
        say("|---|---|")
        for label, env in cfgs:
            n = syscall_count(args.build, "resnet50_b1", label, env, args.tmp, 10)
            say(f"| {label} | {n:.1f} |")
    say()
    say(f"elapsed {time.time() - start:.0f} s; load average at end: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
