"""PyTorch inference on modelmem's allocator: the two lines, then ordinary PyTorch code.

  MODELMEM_ALLOC_CONF=expandable_segments:True \
    python3 examples/pytorch_cuda_alloc.py build/libmodelmem_cuda_alloc.so

While it runs, `modelmem info` in another terminal shows its pool ("pytorch" by default, or
MODELMEM_POOL_NAME).
"""
import ctypes
import sys
import time

import torch

lib_path = sys.argv[1] if len(sys.argv) > 1 else "build/libmodelmem_cuda_alloc.so"

# The two lines: before the first CUDA allocation.
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "modelmem_alloc", "modelmem_free")
torch.cuda.memory.change_current_allocator(alloc)

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda().eval()
with torch.inference_mode():
    for step, batch in enumerate([1, 7, 16, 3, 32] * 20):
        y = model(torch.randn(batch, 1024, device="cuda"))
        torch.cuda.synchronize()
        if step == 50:
            time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)  # time to run `modelmem info`

# PyTorch's memory_stats() is empty under a pluggable allocator; the library reports its own.
stats = (ctypes.c_ulonglong * 6)()
mm = ctypes.CDLL(lib_path)
mm.modelmem_cuda_describe.restype = ctypes.c_char_p
mm.modelmem_cuda_stats(0, stats, 6)
print("allocator:", mm.modelmem_cuda_describe(0).decode())
print("reserved %.1f MiB, allocated %.1f MiB, peak reserved %.1f MiB, peak allocated %.1f MiB"
      % tuple(v / 2**20 for v in stats[:4]))
