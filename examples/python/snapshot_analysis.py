#!/usr/bin/env python3
"""Analyses a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, or torch_npu's): the
summary, the advice with config keys, the top allocation sites, and a viewer page.

Without an argument it writes a small snapshot in PyTorch's layout first (Debian's CPU-only
torch cannot record one).

  PYTHONPATH=build/python python3 examples/python/snapshot_analysis.py [snapshot.pickle]
"""
import os
import pickle
import sys

import modelmem

MiB = 1 << 20


def example_snapshot(path):
    """Three training-like steps: activations allocated and freed in a 64 MiB segment."""
    base = 0x7F0000000000
    events, t = [], 0
    def ev(action, addr, size, frames=()):
        nonlocal t
        t += 25
        events.append({"action": action, "addr": addr, "size": size, "stream": 0,
                       "time_us": t, "frames": [{"filename": f, "line": l, "name": n}
                                                for f, l, n in frames]})
    ev("segment_alloc", base, 64 * MiB)
    for step in range(3):
        ev("alloc", base, 16 * MiB, [("train.py", 31, "forward")])
        ev("alloc", base + 16 * MiB, 24 * MiB, [("train.py", 32, "forward")])
        ev("free_requested", base, 16 * MiB)
        ev("free_completed", base, 16 * MiB)
        ev("free_requested", base + 16 * MiB, 24 * MiB)
        ev("free_completed", base + 16 * MiB, 24 * MiB)
    snap = {"segments": [{"device": 0, "address": base, "total_size": 64 * MiB, "stream": 0,
                          "blocks": [{"address": base, "size": 64 * MiB, "state": "inactive",
                                      "frames": []}]}],
            "device_traces": [events]}
    with open(path, "wb") as f:
        pickle.dump(snap, f)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "example_snapshot.pickle"
    if len(sys.argv) <= 1:
        example_snapshot(path)
    trace = modelmem.Trace.load(path)
    analysis = trace.analyze()
    s = analysis.summary
    print(f"{path}: {s['allocs']} allocations, peak live {s['peak_live'] / MiB:.1f} MiB, "
          f"peak reserved {(s['peak_reserved'] or 0) / MiB:.1f} MiB, {len(analysis.steps)} steps")
    for a in analysis.advice:
        print(f"[{a.topic}] {a.message}" + (f"  config: {a.config}" if a.config else ""))
    print("top allocation sites:")
    for site in analysis.sites[:5]:
        print(f"  {site.bytes / MiB:8.1f} MiB in {site.allocs:4} allocations  {site.site}")
    trace.to_html("snapshot.html")
    print("viewer: snapshot.html")


if __name__ == "__main__":
    main()
