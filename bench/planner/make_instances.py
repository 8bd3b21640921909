#!/usr/bin/env python3
"""Turns the traces recorded by record_training.sh into planning problems (MiniMalloc CSV) with
`modelmem trace --format problem --live-in`: NAME.step.csv is the last recorded training step
(forward, backward, optimiser step; the weights, gradients and optimiser state allocated before it
enter as buffers live from its start), NAME.steps.csv all the steps after the first one in one
window. The steps are found by the sentinel allocations train_step.py makes around each step;
the sentinels themselves are dropped.

  make_instances.py TRACE_DIR OUT_DIR [--modelmem build/modelmem]
"""
import argparse
import csv
import os
import subprocess
import sys

SENTINEL = 3 * (1 << 20) + 17


def sentinel_events(trace):
    """Event indices (as `modelmem trace --window` counts them) of the sentinel allocations."""
    found = []
    with open(trace) as f:
        rows = csv.reader(f)
        header = next(rows)
        ev, size = header.index("event"), header.index("size")
        for i, r in enumerate(rows):
            if r[ev] == "alloc" and r[size] == str(SENTINEL):
                found.append(i)
    return found


def convert(modelmem, trace, begin, end, out):
    tmp = out + ".tmp"
    subprocess.run([modelmem, "trace", trace, "--format", "problem", "--live-in",
                    "--window", f"{begin}:{end}", "-o", tmp], check=True, stdout=subprocess.DEVNULL)
    kept = 0
    with open(tmp) as src, open(out, "w") as dst:
        dst.write(src.readline())
        for line in src:
            if line.rstrip("\n").split(",")[3] != str(SENTINEL):
                dst.write(line)
                kept += 1
    os.remove(tmp)
    print(f"{out}: {kept} buffers", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--modelmem", default="build/modelmem")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    traces = sorted(f for f in os.listdir(a.trace_dir) if f.endswith(".trace.csv"))
    if not traces:
        sys.exit(f"{a.trace_dir}: no *.trace.csv")
    for name in traces:
        path = os.path.join(a.trace_dir, name)
        marks = sentinel_events(path)
        if len(marks) < 4 or len(marks) % 2:
            sys.exit(f"{path}: expected two sentinel allocations per step, found {len(marks)}")
        steps = [(marks[i] + 1, marks[i + 1]) for i in range(0, len(marks), 2)]
        base = name[: -len(".trace.csv")]
        convert(a.modelmem, path, *steps[-1], os.path.join(a.out_dir, base + ".step.csv"))
        if len(steps) > 2:
            convert(a.modelmem, path, steps[1][0], steps[-1][1],
                    os.path.join(a.out_dir, base + ".steps.csv"))


if __name__ == "__main__":
    main()
