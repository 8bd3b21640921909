#!/usr/bin/env python3
"""Two models in one process, each in its own modelmem pool with a quota (the seed's several
models on one device). A model that outgrows its quota gets PyTorch's out-of-memory error naming
the pool, and never takes memory from the other pool.

  PYTHONPATH=build/python python3 examples/python/two_pools.py
"""
import os

import torch

import modelmem
import modelmem.torch as mt

MiB = 1 << 20


def main():
    handle = mt.use_cpu_allocator("strategy:caching")
    torch.manual_seed(0)
    with modelmem.pool("classifier", quota=64 * MiB):
        classifier = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                         torch.nn.Linear(4096, 10)).eval()
    with modelmem.pool("encoder", quota=48 * MiB):
        encoder = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), 2).eval()

    with torch.no_grad():
        with modelmem.pool("classifier", quota=64 * MiB) as p:
            y = classifier(torch.randn(32, 1024))
            print(f"classifier: output {tuple(y.shape)}, pool uses {p.used / MiB:.1f} MiB "
                  f"(peak {p.peak_used / MiB:.1f}) of {p.quota / MiB:.0f} MiB")
        with modelmem.pool("encoder", quota=48 * MiB) as p:
            z = encoder(torch.randn(8, 128, 256))
            print(f"encoder:    output {tuple(z.shape)}, pool uses {p.used / MiB:.1f} MiB "
                  f"(peak {p.peak_used / MiB:.1f}) of {p.quota / MiB:.0f} MiB")
            try:
                encoder(torch.randn(64, 512, 256))  # a batch too large for the encoder's quota
            except RuntimeError as e:
                print("encoder, batch 64 x 512: refused:", str(e).splitlines()[0])
    for proc in modelmem.info():
        if proc["pid"] == os.getpid():
            for q in proc["pools"]:
                budget = f"{q['budget'] / MiB:.0f} MiB" if q["budget"] else "none"
                print(f"pool {q['pool']:<12} quota {budget:>8}  allocated "
                      f"{q['allocated'] / MiB:7.1f} MiB  peak {q['peak_allocated'] / MiB:7.1f} MiB")
    print(handle.report(), end="")


if __name__ == "__main__":
    main()
