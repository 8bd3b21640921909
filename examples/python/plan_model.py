#!/usr/bin/env python3
"""Plans a model's activation memory ahead of time and draws the plan.

  PYTHONPATH=build/python python3 examples/python/plan_model.py [models/resnet50.onnx] [-o plan.html]
"""
import argparse
import os

import modelmem

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=os.path.join(HERE, "..", "..", "models", "resnet50.onnx"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("-o", "--html", default="plan.html")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    plan = modelmem.plan(args.model, dims={"batch": args.batch}, time_limit=5)
    print(plan)
    largest = sorted(plan.tensors, key=lambda t: t.size, reverse=True)[:5]
    print("largest tensors:")
    for t in largest:
        print(f"  {t.size:>12,} B at offset {t.offset:>12,}  steps {t.first}..{t.last}  {t.name}")
    half = modelmem.plan(args.model, dims={"batch": args.batch}, dtype="fp16", time_limit=5)
    print(f"in fp16: arena {half.arena_bytes:,} B ({half.arena_bytes / plan.arena_bytes:.2f} x)")
    plan.to_html(args.html)
    print(f"picture: {args.html}")
    if args.json:
        plan.to_json(args.json)
        print(f"plan for the planned arena (plan:{args.json}): {args.json}")


if __name__ == "__main__":
    main()
