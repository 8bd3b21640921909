# planned_steps:marked from Python: marks 5 steps with the preload's C symbols (ctypes), each
# making the same three 1 MiB blocks, and prints what modelmem_step_begin returned.
import ctypes

lib = ctypes.CDLL(None)
codes = []
for _ in range(5):
    codes.append(lib.modelmem_step_begin())
    blocks = [bytearray(1 << 20) for _ in range(3)]
    del blocks
    codes.append(lib.modelmem_step_end())
print("codes", *codes, flush=True)
