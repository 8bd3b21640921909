#!/usr/bin/env python3
"""MemoryLogger's cost per allocation: a loop allocating and freeing one small CPU tensor through
modelmem (strategy:caching), without a logger, with MemoryLogger(stacks=False) and with
MemoryLogger() (Python caller recorded). Rounds alternate the three; the median round counts.

  PYTHONPATH=build/python python3 bench/python/logger_cost.py [--n 100000] [--rounds 7]
"""
import argparse
import statistics
import time

import torch

import modelmem
import modelmem.torch as mt


def loop(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        x = torch.empty(64)
        del x
    return (time.perf_counter_ns() - t) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    mt.use_cpu_allocator("strategy:caching")
    loop(10000)
    results = {"no logger": [], "MemoryLogger(stacks=False)": [], "MemoryLogger()": []}
    events = 0
    for _ in range(args.rounds):
        results["no logger"].append(loop(args.n))
        with modelmem.MemoryLogger(stacks=False):
            results["MemoryLogger(stacks=False)"].append(loop(args.n))
        with modelmem.MemoryLogger() as log:
            results["MemoryLogger()"].append(loop(args.n))
        events = len(log)
        sites = log.analyze().sites
    base = statistics.median(results["no logger"])
    print(f"torch.empty(64) + free through modelmem, {args.n} per round, {args.rounds} rounds "
          f"(median round)")
    print(f"{'':<28} {'ns per alloc+free':>18} {'added ns':>9}")
    for name, r in results.items():
        m = statistics.median(r)
        print(f"{name:<28} {m:>18.0f} {m - base:>9.0f}")
    print(f"last logged round: {events} events, top site {sites[0].site} ({sites[0].allocs} allocs)")


if __name__ == "__main__":
    main()
