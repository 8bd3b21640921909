# Runs torchvision models in their per-model pools at a batch, as `plan --fit` / `plan
# --device-memory` planned them: argv: SIZE MODEL:BATCH [MODEL:BATCH ...]. Each model is built
# (random weights, eval mode) and its input made inside its pool (modelmem_pool_push(MODEL)),
# then each runs three inferences under inference_mode on one thread, inside its pool. Prints
# "ok MODEL BATCH" or "refused MODEL BATCH" (an allocation the pool refused) per model.
import ctypes
import sys

import torch
import torchvision

torch.set_num_threads(1)
torch.manual_seed(0)
lib = ctypes.CDLL(None, use_errno=True)
lib.modelmem_pool_push.argtypes = [ctypes.c_char_p]
size = int(sys.argv[1])
runs = []
for spec in sys.argv[2:]:
    name, batch = spec.rsplit(":", 1)
    if lib.modelmem_pool_push(name.encode()) != 0:
        sys.exit(f"push {name} failed errno {ctypes.get_errno()}")
    try:
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(int(batch), 3, size, size)
        runs.append((name, batch, model, x))
    except RuntimeError as e:
        print(f"refused {name} {batch} while building: {e}".splitlines()[0], flush=True)
    lib.modelmem_pool_pop()
for name, batch, model, x in runs:
    lib.modelmem_pool_push(name.encode())
    try:
        with torch.inference_mode():
            for _ in range(3):
                y = model(x)
                del y
        print(f"ok {name} {batch}", flush=True)
    except RuntimeError as e:
        print(f"refused {name} {batch}: {e}".splitlines()[0], flush=True)
    lib.modelmem_pool_pop()
