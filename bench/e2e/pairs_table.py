#!/usr/bin/env python3
"""The median table of bench_small_pairs runs: reads lines "NAME|PATTERN NS" (one per pattern and
run) from FILE and prints a Markdown table, a row per NAME in first-seen order (sorted with
--sorted), a column per pattern. Usage: pairs_table.py FILE [FIRST_COLUMN] [--sorted]"""
import statistics
import sys

args = [a for a in sys.argv[1:] if a != "--sorted"]
rows = {}
for line in open(args[0]):
    name, rest = line.rstrip("\n").split("|")
    pattern, ns = rest.split()
    rows.setdefault(name, {}).setdefault(pattern, []).append(float(ns))
patterns = ["burst64", "burst1k", "align64"]
print(f"| {args[1] if len(args) > 1 else 'allocator'} | " + " | ".join(patterns) + " |")
print("|---|" + "---|" * len(patterns))
for name in sorted(rows) if "--sorted" in sys.argv else rows:
    cells = " | ".join(f"{statistics.median(rows[name][p]):.1f}" for p in patterns)
    print(f"| {name} | {cells} |")
