"""MindSpore (2.7 or later, Ascend) on modelmem's allocator (needs an Ascend NPU).

  MODELMEM_ALLOC_CONF=strategy:static,static_pool_mb:8192 \
    python3 examples/ascend/mindspore_example.py build/libmodelmem_npu_alloc.so

MindSpore's pluggable functions get no device argument: modelmem allocates on the device current
on the calling thread (MindSpore sets it).
"""
import sys

import mindspore as ms
import numpy as np
from mindspore import nn

lib_path = sys.argv[1] if len(sys.argv) > 1 else "build/libmodelmem_npu_alloc.so"
ms.set_device("Ascend")

allocator = ms.runtime.PluggableAllocator(lib_path, "modelmem_ms_alloc", "modelmem_ms_free")
pool = ms.runtime.MemPool(allocator)

net = nn.SequentialCell([nn.Dense(1024, 4096), nn.GELU(), nn.Dense(4096, 1024)])
with ms.runtime.use_mem_pool(pool):
    for batch in [1, 7, 16, 3, 32] * 20:
        y = net(ms.Tensor(np.random.randn(batch, 1024).astype(np.float32)))
        y.asnumpy()
print("done; `modelmem info` showed the pool while it ran")
