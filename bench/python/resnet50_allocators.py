#!/usr/bin/env python3
"""ResNet-50 batch 1 inference on the CPU: PyTorch's default CPU allocator against modelmem's
use_cpu_allocator("strategy:planned") (planned_steps auto, and marked) with a step mark per
inference, side by side. Each run is
a fresh python3 (one CPU allocator per process); runs alternate default / planned. Reports the
median inference time (p50) and the page faults and OS calls (planned: modelmem's device calls)
per steady inference.

  PYTHONPATH=build/python nice -n 10 python3 bench/python/resnet50_allocators.py [--runs 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch, torchvision
mode, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
h = None
if mode != "default":
    import modelmem.torch as mt
    h = mt.use_cpu_allocator(mode)
torch.manual_seed(0)
model = torchvision.models.resnet50().eval()
x = torch.randn(1, 3, 224, 224)
def infer():
    with torch.no_grad():
        if h is None:
            y = model(x)
            return int(y.argmax())
        with h.step():
            y = model(x)
            top = int(y.argmax())
            del y
        return top
for _ in range(warmup):
    infer()
calls = lambda: (h.stats()["num_device_alloc"] + h.stats()["num_device_free"]) if h else 0
c0, f0 = calls(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
times = []
for _ in range(steps):
    t = time.perf_counter(); infer(); times.append(time.perf_counter() - t)
print(json.dumps({"p50_ms": sorted(times)[len(times) // 2] * 1e3,
                  "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps,
                  "calls": (calls() - c0) / steps,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    modes = ("default", "strategy:planned", "strategy:planned,planned_steps:marked")
    rows = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode in modes:
            out = subprocess.run([sys.executable, "-c", CHILD, mode,
                                  str(args.steps), str(args.warmup), str(args.threads)],
                                 capture_output=True, text=True, check=True, env=os.environ)
            rows[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"ResNet-50 b1, {args.threads} thread(s), {args.steps} inferences after {args.warmup} "
          f"warm-up, {args.runs} alternating runs per allocator (median of the runs' p50)")
    print(f"{'allocator':<60} {'p50 ms':>7} {'runs p50 ms':>20} {'faults/inf':>10} "
          f"{'OS calls/inf':>12} {'max RSS MB':>10}")
    for mode, r in rows.items():
        name = "PyTorch's default (c10 + glibc)" if mode == "default" else \
            f'use_cpu_allocator("{mode}") + step()'
        p50 = statistics.median(x["p50_ms"] for x in r)
        each = " ".join(f"{x['p50_ms']:.1f}" for x in r)
        calls = f"{statistics.median(x['calls'] for x in r):.1f}" if mode != "default" else "-"
        print(f"{name:<60} {p50:>7.1f} {each:>20} "
              f"{statistics.median(x['faults'] for x in r):>10.1f} "
              f"{calls:>12} {statistics.median(x['rss_mb'] for x in r):>10.0f}")


if __name__ == "__main__":
    main()
