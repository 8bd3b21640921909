"""modelmem.pool(name) routing the NPU library's allocations (per-model pools in one torch_npu
process), with the quota from the config string's pools:[...], over the emulated Ascend runtime."""
import os

import pytest

from conftest import BUILD, run_python

if BUILD is None:
    # Against a pip installation: the package's own NPU library, over the emulated runtime of the
    # CMake build that runs this test (a test artifact the package does not ship).
    import modelmem
    ACL = os.environ.get("MODELMEM_EMULATED_ACL", "")
    try:
        NPU = modelmem.library_path("npu")
    except modelmem.UnsupportedError:
        NPU = ""
else:
    ACL = os.path.join(BUILD, "emulated_acl", "libascendcl.so")
    NPU = os.path.join(BUILD, "libmodelmem_npu_alloc.so")

needs_npu_library = pytest.mark.skipif(
    not (ACL and NPU and os.path.exists(ACL) and os.path.exists(NPU)),
    reason="the NPU library or the emulated ACL runtime is not built (MODELMEM_EMULATED_ACL "
    "names the runtime for an installed package)")

CHILD = r"""
import ctypes, threading, modelmem
MiB = 1 << 20
acl = ctypes.CDLL(ACL)
assert acl.aclInit(None) == 0
lib = ctypes.CDLL(NPU)                      # as torch_npu's NPUPluggableAllocator loads it
lib.modelmem_npu_alloc.restype = ctypes.c_void_p
lib.modelmem_npu_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.modelmem_npu_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.modelmem_npu_last_error.restype = ctypes.c_char_p
bert, resnet = modelmem.pool("bert"), modelmem.pool("resnet50")
assert bert.quota == 64 * MiB and resnet.quota == 32 * MiB, (bert.quota, resnet.quota)
out = {}
def model(pool, fits, breach):
    assert acl.aclrtSetDevice(0) == 0
    with pool:
        p = lib.modelmem_npu_alloc(fits * MiB, 0, None)
        q = lib.modelmem_npu_alloc(breach * MiB, 0, None)
        out[pool.name] = (p, q, lib.modelmem_npu_last_error().decode())
        lib.modelmem_npu_free(p, fits * MiB, 0, None)
threads = [threading.Thread(target=model, args=(bert, 50, 20)),
           threading.Thread(target=model, args=(resnet, 24, 10))]
with modelmem.MemoryLogger() as log:        # the NPU library's allocations, through its listener
    for t in threads: t.start()
    for t in threads: t.join()
got = sorted((e["event"], e["device"], e["pool"], e["size"] // MiB) for e in log.events()
             if e["event"] != "segment_alloc")
# Each breach is an OOM of the pool it went to.
assert got == [("alloc", "npu:0", "bert", 50), ("alloc", "npu:0", "resnet50", 24),
               ("free", "npu:0", "bert", 50), ("free", "npu:0", "resnet50", 24),
               ("oom", "npu:0", "bert", 20), ("oom", "npu:0", "resnet50", 10)], got
assert {e["pool"] for e in log.events() if e["event"] == "segment_alloc"} == {"bert", "resnet50"}
for name, (p, q, why) in out.items():
    assert p and q is None, (name, out)
    assert "pool '%s' would exceed its quota" % name in why, why
assert acl.aclrtSetDevice(0) == 0
big = lib.modelmem_npu_alloc(200 * MiB, 0, None)   # outside any pool: the main stack
assert big
lib.modelmem_npu_free(big, 200 * MiB, 0, None)
try:
    modelmem.pool("gan")
    raise SystemExit("a pool the string does not list was accepted")
except modelmem.InvalidInputError as e:
    print("refused:", e)
print("ok")
"""


@needs_npu_library
def test_pool_routes_the_npu_librarys_allocations_with_the_strings_quota():
    r = run_python("ACL, NPU = %r, %r\n" % (ACL, NPU) + CHILD,
                   env={"MODELMEM_ACL_LIBRARY": ACL, "MODELMEM_MONITOR": "0",
                        "MODELMEM_ALLOC_CONF": "device:npu,pools:[bert:64,resnet50:32]"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused: pool 'gan' is not one of the configuration's pools (bert, resnet50)" in r.stdout
    assert r.stdout.endswith("ok\n")


def test_pool_with_nothing_to_route_says_what_it_needs():
    r = run_python("import modelmem\nwith modelmem.pool('bert', quota=1 << 20):\n    pass\n",
                   env={"MODELMEM_ALLOC_CONF": ""})
    assert r.returncode != 0
    assert "call modelmem.torch.use_cpu_allocator() first, run the program under `modelmem run` " \
        "(the preload), or load libmodelmem_npu_alloc.so" in r.stderr
