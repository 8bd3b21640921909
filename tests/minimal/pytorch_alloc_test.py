"""PyTorch on modelmem: the two lines of the README, then real work on the GPU.

Usage: python3 pytorch_alloc_test.py path/to/libmodelmem_cuda_alloc.so
Exit codes: 0 passed, 1 failed, 77 skipped (no PyTorch, or no GPU).
"""
import ctypes
import os
import sys


def main() -> int:
    lib_path = sys.argv[1]
    try:
        import torch
    except ImportError:
        print("SKIPPED: PyTorch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no GPU")
        return 77

    os.environ.setdefault("MODELMEM_ALLOC_CONF", "expandable_segments:True")
    os.environ["MODELMEM_POOL_NAME"] = "pytest-torch"
    # The two lines.
    allocator = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "modelmem_alloc", "modelmem_free")
    torch.cuda.memory.change_current_allocator(allocator)

    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("check failed:", what)

    lib = ctypes.CDLL(lib_path)
    lib.modelmem_cuda_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    lib.modelmem_cuda_describe.restype = ctypes.c_char_p

    def stats():
        out = (ctypes.c_ulonglong * 6)()
        n = lib.modelmem_cuda_stats(0, out, 6)
        return list(out)[:n]

    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    c = a @ b
    expected = a.cpu() @ b.cpu()
    check(torch.allclose(c.cpu(), expected, rtol=1e-3, atol=1e-3), "matmul result")
    s = stats()
    check(len(s) == 6, "stats filled")
    check(s[1] >= 3 * 4 * 1024 * 1024, "allocated covers three 4 MiB tensors: %s" % s)
    check(s[0] >= s[1], "reserved >= allocated")

    # Many sizes, freed and reused; results stay right.
    total = 0.0
    for n in (1, 7, 16, 3, 32, 5, 64, 2):
        x = torch.ones(n, 3, 224, 224, device="cuda")
        total += float((x * 2).sum())
    check(total == 2 * 3 * 224 * 224 * (1 + 7 + 16 + 3 + 32 + 5 + 64 + 2), "sums")

    # The segment `modelmem info` reads exists, owner-only.
    user_ok = False
    for name in os.listdir("/dev/shm"):
        if name.startswith("modelmem.") and name.endswith("." + str(os.getpid())):
            mode = os.stat(os.path.join("/dev/shm", name)).st_mode & 0o777
            user_ok = mode == 0o600
    check(user_ok, "published segment with mode 0600")

    # Out of memory becomes a Python exception, and the allocator keeps working.
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        check(False, "a 1 PiB tensor was allocated")
    except (RuntimeError, torch.OutOfMemoryError) as e:
        check("out of memory" in str(e), "OOM message: %s" % e)
    y = torch.zeros(10, device="cuda") + 1
    check(float(y.sum()) == 10.0, "after OOM")

    del a, b, c, x, y
    torch.cuda.synchronize()
    print("allocator:", lib.modelmem_cuda_describe(0).decode())
    print("stats [reserved, allocated, peak reserved, peak allocated, device allocs, ooms]:", stats())
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("pytorch_alloc_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
