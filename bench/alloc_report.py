#!/usr/bin/env python3
"""Turns `bench_alloc --benchmark_format=json` output into the Markdown tables of
docs/benchmarks.md (config section): ns per alloc+free pair (CPU time) for every heap, and peak
reserved / peak live on the recorded traces.

usage: bench/alloc_report.py RESULT.json [RESULT.json ...]  (later files override earlier rows)
"""
import json
import sys
from collections import OrderedDict

HEAPS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "mm_system", "mm_static", "mm_caching",
         "mm_caching_tc", "mm_expandable"]


def ratio(v, heap):
    return f"{v[heap] / v['mimalloc']:.2f}" if heap in v and "mimalloc" in v else "-"


def size_name(n):
    n = int(n)
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def main(paths):
    rows = OrderedDict()
    for path in paths:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("error_occurred"):
                    continue
                rows[b["name"]] = b
    hit = OrderedDict()
    rand = OrderedDict()
    trace = OrderedDict()
    for name, b in rows.items():
        parts = name.split("/")
        threads = next((p.split(":")[1] for p in parts if p.startswith("threads:")), "1")
        unit = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        cpu = b["cpu_time"] * unit
        if parts[0] == "BM_Hit":
            hit.setdefault((parts[2], threads), {})[parts[1]] = cpu
        elif parts[0] == "BM_Random":
            rand.setdefault(threads, {})[parts[1]] = cpu
        elif parts[0] == "BM_Trace":
            trace.setdefault(parts[2], {})[parts[1]] = (cpu / b["pairs"], b)
    heaps = [h for h in HEAPS if any(h in v for v in list(hit.values()) + list(rand.values()))]

    print("ns (CPU) per alloc+free pair; cache hit = the same size freed and allocated again\n")
    print("| size | threads | " + " | ".join(heaps) +
          " | mm_caching / mimalloc | mm_caching_tc / mimalloc |")
    print("|---" * (len(heaps) + 4) + "|")
    for (size, threads), v in hit.items():
        cells = [f"{v[h]:.1f}" if h in v else "-" for h in heaps]
        print(f"| {size_name(size)} | {threads} | " + " | ".join(cells) +
              f" | {ratio(v, 'mm_caching')} | {ratio(v, 'mm_caching_tc')} |")
    for threads, v in rand.items():
        cells = [f"{v[h]:.1f}" if h in v else "-" for h in heaps]
        print(f"| random 256 B..64 MiB | {threads} | " + " | ".join(cells) +
              f" | {ratio(v, 'mm_caching')} | {ratio(v, 'mm_caching_tc')} |")

    if trace:
        print("\nRecorded PyTorch traces replayed in order: ns (CPU) per pair, and for modelmem's "
              "strategies peak reserved / peak live (static: the smallest safety factor over peak "
              "live that replays without running out)\n")
        mm = [h for h in heaps if h.startswith("mm_")]
        print("| trace | peak live | " + " | ".join(heaps) + " | " +
              " | ".join(f"{h} reserved (/live)" for h in mm) + " |")
        print("|---" * (len(heaps) + 2 + len(mm)) + "|")
        for tname, v in trace.items():
            live = next(iter(v.values()))[1]["peak_live_MiB"]
            cells = [f"{v[h][0]:.1f}" if h in v else "-" for h in heaps]
            ratios = []
            for h in mm:
                if h not in v or "reserved_per_live" not in v[h][1]:
                    ratios.append("-")
                    continue
                b = v[h][1]
                extra = f" (x{b['static_factor']:g})" if "static_factor" in b else ""
                ratios.append(f"{b['peak_reserved_MiB']:.2f} MiB = {b['reserved_per_live']:.2f}{extra}")
            print(f"| {tname} | {live:.2f} MiB | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
