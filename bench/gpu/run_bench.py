"""Runs the inference benchmark under every allocator, each in a fresh process, and prints a
table last. Writes every result (JSON) and the table (Markdown) to --out.

  python3 run_bench.py --lib build-gpu/libmodelmem_cuda_alloc.so --out DIR [--cycles N]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def run(model, label, allocator, env_extra, args):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("MODELMEM_ALLOC_CONF", None)
    env.update(env_extra)
    env["MODELMEM_POOL_NAME"] = model
    cmd = [sys.executable, os.path.join(HERE, "infer_bench.py"), "--model", model, "--allocator",
           allocator, "--lib", args.lib, "--cycles", str(args.cycles), "--label", label]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if result is None:
        result = {"label": label, "model": model, "allocator": allocator,
                  "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    result["returncode"] = p.returncode
    result["seconds"] = round(time.time() - t0, 1)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
    print("  %-9s %-34s %5.1fs %s" % (model, label, result["seconds"],
                                      "ERROR " + result.get("error", "") if result.get("error") else "ok"),
          flush=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cycles", type=int, default=12)
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--planned", default="", help="MODELMEM_ALLOC_CONF of the planned arena, if any")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for model in args.models.split(","):
        native = run(model, "pytorch native", "native", {}, args)
        results.append(native)
        results.append(run(model, "pytorch native expandable", "native",
                           {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, args))
        results.append(run(model, "modelmem caching", "modelmem",
                           {"MODELMEM_ALLOC_CONF": "strategy:caching"}, args))
        results.append(run(model, "modelmem expandable", "modelmem",
                           {"MODELMEM_ALLOC_CONF": "expandable_segments:True"}, args))
        # The static pool is sized from the plan of this workload: the peak of live bytes
        # measured under PyTorch's allocator, with 25 % headroom for placement losses.
        if native.get("peak_allocated"):
            mb = int(math.ceil(native["peak_allocated"] * 1.25 / MiB))
            results.append(run(model, "modelmem static %d MiB" % mb, "modelmem",
                               {"MODELMEM_ALLOC_CONF": "strategy:static,static_pool_mb:%d" % mb},
                               args))
        if args.planned:
            results.append(run(model, "modelmem planned arena", "modelmem",
                               {"MODELMEM_ALLOC_CONF": args.planned}, args))

    with open(os.path.join(args.out, "gpu_bench.json"), "w") as f:
        json.dump(results, f, indent=2)

    header = "| model | allocator | peak reserved MiB | peak allocated MiB | reserved/allocated | p50 ms | p99 ms |"
    lines = [header, "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.get("error") and not r.get("peak_allocated"):
            lines.append("| %s | %s | failed: %s | | | | |" % (r["model"], r["label"], r.get("error", "")))
            continue
        note = " (failed: %s)" % r["error"] if r.get("error") else ""
        lines.append("| %s | %s%s | %.1f | %.1f | %.3f | %.2f | %.2f |" % (
            r["model"], r["label"], note, r["peak_reserved"] / MiB, r["peak_allocated"] / MiB,
            r["ratio"], r["p50_ms"], r["p99_ms"]))
    table = "\n".join(lines)
    with open(os.path.join(args.out, "gpu_bench.md"), "w") as f:
        f.write(table + "\n")
    ok = all(not r.get("error") for r in results)
    # The targets: reserved/allocated at peak and p99 no higher than PyTorch's with expandable
    # segments (per model, for modelmem expandable).
    verdicts = []
    for model in args.models.split(","):
        by = {r["label"]: r for r in results if r["model"] == model}
        ref, mine = by.get("pytorch native expandable"), by.get("modelmem expandable")
        if ref and mine and ref.get("ratio") and mine.get("ratio"):
            verdicts.append("%s: ratio %.3f vs %.3f (%s), p99 %.2f vs %.2f ms (%s)" % (
                model, mine["ratio"], ref["ratio"], "met" if mine["ratio"] <= ref["ratio"] else "missed",
                mine["p99_ms"], ref["p99_ms"], "met" if mine["p99_ms"] <= ref["p99_ms"] else "missed"))
    with open(os.path.join(args.out, "gpu_bench.md"), "a") as f:
        f.write("\n" + "\n".join(verdicts) + "\n")
    print()
    print("\n".join(verdicts))
    print()
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
