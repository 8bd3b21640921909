"""torch_npu inference on modelmem's allocator (needs an Ascend NPU and torch_npu).

  MODELMEM_ALLOC_CONF=expandable_segments:True \
    python3 examples/ascend/torch_npu_example.py build/libmodelmem_npu_alloc.so

Without MODELMEM_ALLOC_CONF the library reads torch_npu's own PYTORCH_NPU_ALLOC_CONF (keys that
mean the same are kept, the others refused by name); `modelmem config` with no argument shows what
either builds. On an NPU without virtual memory, expandable_segments:True warns once and goes on
with torch_npu's fallback (the caching pool with fixed-size segments). `modelmem info` in another
terminal shows the NPUs and this process's pool ("npu", or MODELMEM_POOL_NAME).

A model with a quota beside the rest of the process: MODELMEM_ALLOC_CONF='device:npu,
pools:[big:256]' and its work inside modelmem_npu_pool_push(b"big") ... _pool_pop() (or
`with modelmem.pool("big"):` from the modelmem package), as at the end of this file, followed by
modelmem.MemoryLogger logging one inference's NPU allocations.
"""
import ctypes
import sys

import torch
import torch_npu  # noqa: F401  (registers the "npu" device)
from torch_npu.npu.memory import NPUPluggableAllocator, change_current_allocator

lib_path = sys.argv[1] if len(sys.argv) > 1 else "build/libmodelmem_npu_alloc.so"

# Before the first NPU allocation: the two functions, then the optional hooks (plain C).
allocator = NPUPluggableAllocator(lib_path, "modelmem_npu_alloc", "modelmem_npu_free")
change_current_allocator(allocator)
mm = ctypes.CDLL(lib_path)
hook = lambda name: ctypes.cast(getattr(mm, name), ctypes.c_void_p).value
allocator.allocator().set_init_fn(hook("modelmem_npu_init"))
allocator.allocator().set_reset_fn(hook("modelmem_npu_reset"))  # torch.npu.empty_cache()
allocator.allocator().set_memory_fraction_fn(hook("modelmem_npu_memory_fraction"))

mm.modelmem_npu_describe.restype = ctypes.c_char_p
device = torch.npu.current_device()

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).npu().eval()
with torch.inference_mode():
    for batch in [1, 7, 16, 3, 32] * 20:
        mm.modelmem_npu_begin_step(device)  # step marks, for strategy:planned
        y = model(torch.randn(batch, 1024, device="npu"))
        torch.npu.synchronize()
        mm.modelmem_npu_end_step(device)

torch.npu.empty_cache()  # calls modelmem_npu_reset: cached memory goes back to the NPU
stats = (ctypes.c_ulonglong * 6)()
mm.modelmem_npu_stats(device, stats, 6)
print("allocator:", mm.modelmem_npu_describe(device).decode())
print("reserved %.1f MiB, allocated %.1f MiB, peak reserved %.1f MiB, peak allocated %.1f MiB"
      % tuple(v / 2**20 for v in stats[:4]))

# Per-model pools: only when MODELMEM_ALLOC_CONF has pools:[...] (push returns 1 otherwise).
mm.modelmem_npu_pool_push.argtypes = [ctypes.c_char_p]
if mm.modelmem_npu_pool_push(b"big") == 0:
    try:
        with torch.inference_mode():
            y = model(torch.randn(64, 1024, device="npu"))  # counted against pool "big"
            torch.npu.synchronize()
    finally:
        mm.modelmem_npu_pool_pop()

# Allocation logging (the seed's MemoryLogger), when the modelmem package is installed: every
# NPU allocation and free with its device, pool, size, stream and Python line.
try:
    import modelmem
except ImportError:
    modelmem = None
if modelmem is not None:
    with modelmem.MemoryLogger() as log, torch.inference_mode():
        y = model(torch.randn(16, 1024, device="npu"))
        torch.npu.synchronize()
    for e in log.events()[:4]:
        print(e["event"], e["device"], e["pool"], e["size"], e["stream"], e["site"])
    print("top allocation sites:", [s.site for s in log.analyze(device="npu:%d" % device).sites[:3]])
