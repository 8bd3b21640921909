#!/usr/bin/env python3
"""Makes a large planning problem (MiniMalloc CSV: id,lower,upper,size) from one or more
recorded training steps: the steps are laid end to end in time, `--copies` times over, the
buffers live across the whole step (weights, gradients, optimiser state: those starting at the
step's first time and ending at its last) kept once for the whole schedule, and `--carry` blocks
per step boundary living from late in one step into the next (a prefetched input batch,
gradient-accumulation buffers), so that the steps are not time-independent. With `--jitter F`
each copy's activation sizes are scaled by a factor drawn in [1-F, 1+F] (variable batch or
sequence lengths), rounded to 256 bytes. Deterministic for a given --seed.

  stack_steps.py STEP.csv [STEP.csv...] --copies K [--carry C] [--jitter F] [--seed S] -o OUT.csv
"""
import argparse
import csv
import random
import sys


def read(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["lower"]), int(r["upper"]), int(r["size"])))
    if not rows:
        sys.exit(f"{path}: no buffers")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="+")
    ap.add_argument("--copies", type=int, required=True)
    ap.add_argument("--carry", type=int, default=2)
    ap.add_argument("--jitter", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    if a.copies < 1 or a.carry < 0 or not 0 <= a.jitter < 1:
        sys.exit("--copies must be >= 1, --carry >= 0, --jitter in [0, 1)")
    rng = random.Random(a.seed)
    steps = [read(p) for p in a.steps]
    out = []  # (lower, upper, size)
    persistent = []
    t = 0
    carried = []  # sizes of blocks started in the previous step
    for k in range(a.copies):
        rows = steps[k % len(steps)]
        lo = min(r[0] for r in rows)
        hi = max(r[1] for r in rows)
        span = hi - lo
        factor = 1 + rng.uniform(-a.jitter, a.jitter) if a.jitter else 1
        for (s, e, size) in rows:
            if s == lo and e == hi:
                if k == 0:
                    persistent.append(size)
                continue
            if factor != 1:
                size = max(256, int(size * factor) // 256 * 256)
            out.append([t + s - lo + 1, t + e - lo + 1, size])
        # Blocks carried from the previous step end early in this one.
        for size in carried:
            out.append([t - max(1, span // 20), t + 1 + rng.randrange(1, max(2, span // 10)), size])
        carried = [rng.choice(rows)[2] for _ in range(a.carry)] if k + 1 < a.copies else []
        t += span + 1
    horizon = t + 1
    for size in persistent:
        out.append([0, horizon, size])
    out.sort(key=lambda r: (r[0], r[1]))
    with open(a.output, "w") as f:
        f.write("id,lower,upper,size\n")
        for i, (s, e, size) in enumerate(out):
            f.write(f"{i},{max(0, s)},{e},{size}\n")
    print(f"wrote {a.output}: {len(out)} buffers, {horizon} time steps", file=sys.stderr)


if __name__ == "__main__":
    main()
