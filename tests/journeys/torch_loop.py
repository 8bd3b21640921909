# The loop of issue 16: 10 steps of 20 torch.randn(1000, 1000) (4 MB each), each step's tensors
# kept until the next step's are made. No period that a plan could use: every block outlives
# its step. Prints the checksum so the work cannot be skipped.
import sys

import torch

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
total = 0.0
xs = []
for step in range(steps):
    xs = [torch.randn(1000, 1000) for _ in range(20)]
    total += float(sum(x[0, 0] for x in xs))
print(f"checksum {total:.6e}")
