# Selects per-model pools through the preload's C symbols (ctypes) and allocates in them:
# argv: POOL MIB [POOL MIB ...]. For each pair, pushes POOL, allocates MIB MiB (bytearray: one
# malloc/calloc), prints "ok POOL MIB" or "refused POOL MIB", and keeps the block.
import ctypes
import sys

lib = ctypes.CDLL(None, use_errno=True)
lib.modelmem_pool_push.argtypes = [ctypes.c_char_p]
lib.modelmem_pool_current.restype = ctypes.c_char_p
kept = []
args = sys.argv[1:]
for name, mib in zip(args[0::2], args[1::2]):
    if lib.modelmem_pool_push(name.encode()) != 0:
        print(f"push {name} failed errno {ctypes.get_errno()}", flush=True)
        continue
    assert lib.modelmem_pool_current() == name.encode()
    try:
        kept.append(bytearray(int(mib) << 20))
        print(f"ok {name} {mib}", flush=True)
    except MemoryError:
        print(f"refused {name} {mib}", flush=True)
    lib.modelmem_pool_pop()
print("unknown", lib.modelmem_pool_push(b"nope"), flush=True)
