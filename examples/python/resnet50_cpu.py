#!/usr/bin/env python3
"""ResNet-50 inference with modelmem as PyTorch's CPU allocator and one step mark per inference.

After the first marked steps the planned arena knows an inference's allocations and serves each
later one from one planned arena: no OS calls (mmap / munmap) and no new page faults per steady
inference. Prints the statistics (PyTorch's memory_stats() names) and the report.

  PYTHONPATH=build/python python3 examples/python/resnet50_cpu.py [--steps 20] [--batch 1]
"""
import argparse
import resource
import time

import torch
import torchvision

import modelmem.torch as mt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="measured inferences")
    ap.add_argument("--warmup", type=int, default=3, help="inferences before measuring")
    ap.add_argument("--batch", type=int, default=1)
    # Steps marked by handle.step(): planned_steps:marked makes the arena follow the marks.
    ap.add_argument("--config", default="strategy:planned,planned_steps:marked")
    args = ap.parse_args()

    handle = mt.use_cpu_allocator(args.config)  # before the model: its weights come from modelmem
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()  # random weights: memory does not care
    x = torch.randn(args.batch, 3, 224, 224)

    def infer():
        with torch.no_grad(), handle.step():
            y = model(x)
            top = int(y.argmax())
            del y  # the output dies inside the step, as every block the arena plans
        return top

    for _ in range(args.warmup):
        infer()
    stats = handle.stats()
    calls0 = stats["num_device_alloc"] + stats["num_device_free"]
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        infer()
        times.append(time.perf_counter() - t)
    stats = handle.stats()
    calls = stats["num_device_alloc"] + stats["num_device_free"] - calls0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    times.sort()
    print(f"resnet50 b{args.batch} under {args.config}: {args.steps} inferences, "
          f"p50 {times[len(times) // 2] * 1e3:.1f} ms")
    print(f"OS calls per steady inference      {calls / args.steps:g}")
    print(f"page faults per steady inference   {faults / args.steps:g}")
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "reserved_bytes.all.peak", "num_alloc_retries",
                "num_ooms", "num_device_alloc", "num_device_free"):
        print(f"{key:<34} {stats[key]}")
    print(handle.report(), end="")


if __name__ == "__main__":
    main()
