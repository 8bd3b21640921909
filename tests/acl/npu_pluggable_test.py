"""libmodelmem_npu_alloc.so driven through ctypes exactly as torch_npu's NPUPluggableAllocator
and MindSpore's PluggableAllocator call it, over the emulated Ascend runtime.

Each scenario runs in a child process of its own (the library builds one stack per device per
process, from the environment). Run by CTest (acl.npu_pluggable_py), or by hand:
  MODELMEM_NPU_ALLOC=build/libmodelmem_npu_alloc.so \
  MODELMEM_EMULATED_ACL=build/emulated_acl/libascendcl.so MODELMEM_CLI=build/modelmem \
  python3 -m unittest -v npu_pluggable_test        (from tests/acl)
"""
import ast
import bisect
import ctypes
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time
import unittest

LIB = os.environ.get("MODELMEM_NPU_ALLOC", "")
ACL = os.environ.get("MODELMEM_EMULATED_ACL", "")
CLI = os.environ.get("MODELMEM_CLI", "")
SOURCE = os.environ.get("MODELMEM_SOURCE_DIR", "")
MiB = 1 << 20

EXPORTS = ["modelmem_npu_alloc", "modelmem_npu_free", "modelmem_ms_alloc", "modelmem_ms_free",
           "modelmem_npu_init", "modelmem_npu_reset", "modelmem_npu_memory_fraction",
           "modelmem_npu_begin_step", "modelmem_npu_end_step", "modelmem_npu_stats",
           "modelmem_npu_reset_peak", "modelmem_npu_trim", "modelmem_npu_describe",
           "modelmem_npu_warning", "modelmem_npu_last_error", "modelmem_npu_pool_push",
           "modelmem_npu_pool_pop", "modelmem_npu_add_listener", "modelmem_npu_remove_listener"]
PYTHON_DIR = os.environ.get("MODELMEM_PYTHON_DIR", "")  # build/python: the modelmem package


class EmulatedAclState(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("plain_allocations", "physical_handles", "mappings", "reservations",
                 "used_bytes", "pending_failures")]


class Event(ctypes.Structure):
    """modelmem_event of config/listener_abi.h (version 1)."""
    _fields_ = [("version", ctypes.c_uint32), ("kind", ctypes.c_uint32),
                ("device", ctypes.c_int32), ("pool", ctypes.c_uint32),
                ("time_ns", ctypes.c_uint64), ("address", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("stream", ctypes.c_void_p),
                ("thread", ctypes.c_uint64), ("device_name", ctypes.c_char_p),
                ("pool_name", ctypes.c_char_p), ("label", ctypes.c_char_p)]


LISTENER = ctypes.CFUNCTYPE(None, ctypes.POINTER(Event), ctypes.c_void_p)
KINDS = ["alloc", "free", "segment_alloc", "segment_free", "map", "unmap", "oom", "mark"]


def load():
    """The framework's view: the runtime (already initialised, a device set) and the library
    with the function types of the pluggable bindings."""
    acl = ctypes.CDLL(ACL)
    rc = acl.aclInit(None)
    assert rc == 0, rc  # the framework initialises the runtime first
    lib = ctypes.CDLL(LIB)
    vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    lib.modelmem_npu_alloc.argtypes = [sz, i, vp]
    lib.modelmem_npu_alloc.restype = vp
    lib.modelmem_npu_free.argtypes = [vp, sz, i, vp]
    lib.modelmem_npu_free.restype = None
    lib.modelmem_ms_alloc.argtypes = [sz, vp]
    lib.modelmem_ms_alloc.restype = vp
    lib.modelmem_ms_free.argtypes = [vp, sz, vp]
    lib.modelmem_ms_free.restype = None
    lib.modelmem_npu_init.argtypes = [i]
    lib.modelmem_npu_reset.argtypes = [ctypes.c_bool]
    lib.modelmem_npu_memory_fraction.argtypes = [ctypes.c_double, i]
    for f in ("modelmem_npu_describe", "modelmem_npu_warning", "modelmem_npu_last_error"):
        getattr(lib, f).restype = ctypes.c_char_p
    lib.modelmem_npu_stats.argtypes = [i, ctypes.POINTER(ctypes.c_ulonglong), i]
    lib.modelmem_npu_pool_push.argtypes = [ctypes.c_char_p]
    lib.modelmem_npu_add_listener.argtypes = [LISTENER, ctypes.c_void_p]
    return acl, lib


def stats(lib, device=0):
    out = (ctypes.c_ulonglong * 6)()
    n = lib.modelmem_npu_stats(device, out, 6)
    assert n == 6, n
    return dict(zip(("reserved", "allocated", "peak_reserved", "peak_allocated",
                     "device_allocs", "ooms"), out))


def emulation_state(acl):
    s = EmulatedAclState()
    acl.modelmem_emulated_acl_state(ctypes.byref(s))
    return s


def stream(acl):
    s = ctypes.c_void_p()
    assert acl.aclrtCreateStream(ctypes.byref(s)) == 0
    return s


class Blocks:
    """Live blocks: no two overlap, and a pattern written at both ends survives until free."""

    def __init__(self):
        self.starts, self.ends, self.tags = [], [], {}

    def add(self, p, size, tag):
        k = bisect.bisect_left(self.starts, p)
        assert k == len(self.starts) or p + size <= self.starts[k], "overlaps the next block"
        assert k == 0 or self.ends[k - 1] <= p, "overlaps the previous block"
        self.starts.insert(k, p)
        self.ends.insert(k, p + size)
        ctypes.memset(p, tag, min(size, 64))
        ctypes.memset(p + size - min(size, 64), tag, min(size, 64))
        self.tags[p] = (size, tag)

    def remove(self, p):
        size, tag = self.tags.pop(p)
        n = min(size, 64)
        assert ctypes.string_at(p, n) == bytes([tag]) * n, "block start overwritten"
        assert ctypes.string_at(p + size - n, n) == bytes([tag]) * n, "block end overwritten"
        k = bisect.bisect_left(self.starts, p)
        del self.starts[k], self.ends[k]
        return size


def random_use(alloc, free, rng, ops, max_mib):
    """Random alloc/free, sizes log-uniform from 512 B to max_mib MiB. Returns live blocks."""
    blocks, live = Blocks(), []
    for n in range(ops):
        if live and rng.random() < 0.45:
            p = live.pop(rng.randrange(len(live)))
            free(p, blocks.remove(p))
            continue
        size = int(2 ** rng.uniform(9, math.log2(max_mib * MiB)))
        p = alloc(size)
        assert p, "allocation of %d bytes failed" % size
        assert p % 256 == 0
        blocks.add(p, size, n % 251 + 1)
        live.append(p)
    return blocks, live


# ---- the child scenarios ----

def child_torch_npu():
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0  # torch_npu has set the device
    lib.modelmem_npu_init(1)  # set_init_fn, with the device count
    s = stream(acl)
    alloc = lambda size: lib.modelmem_npu_alloc(size, 0, s)
    free = lambda p, size: lib.modelmem_npu_free(p, size, 0, s)
    blocks, live = random_use(alloc, free, random.Random(7), 3000, 40)
    # More than the whole device: NULL (torch_npu raises its own OOM), and the next one works.
    assert lib.modelmem_npu_alloc(4096 * MiB, 0, s) is None
    why = lib.modelmem_npu_last_error().decode()
    assert "NPU out of memory" in why and "4.00 GiB" in why, why
    assert stats(lib)["ooms"] >= 1
    p = alloc(8 * MiB)
    assert p
    free(p, 8 * MiB)
    for p in list(live):
        free(p, blocks.remove(p))
    st = stats(lib)
    assert st["allocated"] == 0, st
    assert st["peak_allocated"] > 0, st
    lib.modelmem_npu_reset(True)  # torch.npu.empty_cache()
    describe = lib.modelmem_npu_describe(0).decode()
    if "static" not in describe:
        assert stats(lib)["reserved"] == 0, stats(lib)
        assert emulation_state(acl).used_bytes == 0
    print("describe:", describe)
    print("warning:", lib.modelmem_npu_warning(0).decode())
    # After the first allocation the fraction cannot change: a message, no effect.
    lib.modelmem_npu_memory_fraction(0.5, 0)


def child_seed():
    """The seed's setting as torch_npu runs it: every allocation served, more than the device
    is NULL and the next one works, the warning (if any) printed for the test to count."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    lib.modelmem_npu_init(1)
    s = stream(acl)
    capacity = int(os.environ["MODELMEM_EMULATED_ACL_MEMORY_MB"]) * MiB
    alloc = lambda size: lib.modelmem_npu_alloc(size, 0, s)
    free = lambda p, size: lib.modelmem_npu_free(p, size, 0, s)
    blocks, live = random_use(alloc, free, random.Random(11), 600,
                              min(40, capacity // MiB // 16))
    assert lib.modelmem_npu_alloc(capacity + MiB, 0, s) is None
    assert "NPU out of memory" in lib.modelmem_npu_last_error().decode()
    p = alloc(3 * MiB)
    assert p, lib.modelmem_npu_last_error()
    free(p, 3 * MiB)
    for p in list(live):
        free(p, blocks.remove(p))
    assert stats(lib)["allocated"] == 0
    print("describe:", lib.modelmem_npu_describe(0).decode())
    print("warning:", lib.modelmem_npu_warning(0).decode())


def child_pools():
    """Two models in one torch_npu process, each thread in its pool (pools:[bert:200,resnet:100])."""
    acl, lib = load()
    results = {}

    def model(name, fits, breach):
        assert acl.aclrtSetDevice(0) == 0
        assert lib.modelmem_npu_pool_push(name.encode()) == 0, lib.modelmem_npu_last_error()
        p = lib.modelmem_npu_alloc(fits * MiB, 0, None)
        q = lib.modelmem_npu_alloc(breach * MiB, 0, None)
        results[name] = (p, q, lib.modelmem_npu_last_error().decode())
        lib.modelmem_npu_free(p, fits * MiB, 0, None)
        assert lib.modelmem_npu_pool_pop() == 0
        assert lib.modelmem_npu_pool_pop() == -1

    threads = [threading.Thread(target=model, args=("bert", 150, 100)),
               threading.Thread(target=model, args=("resnet", 80, 30))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("bert", "resnet"):
        p, q, why = results[name]
        assert p and q is None, (name, results[name])
        assert "pool '%s' would exceed its quota" % name in why, why
    # The main stack (no pool selected) has no quota; the breaches took nothing from it.
    assert acl.aclrtSetDevice(0) == 0
    big = lib.modelmem_npu_alloc(500 * MiB, 0, None)
    assert big, lib.modelmem_npu_last_error()
    lib.modelmem_npu_free(big, 500 * MiB, 0, None)
    assert lib.modelmem_npu_pool_push(b"nope") == -1
    print("why:", lib.modelmem_npu_last_error().decode())
    print("describe:", lib.modelmem_npu_describe(0).decode())


def child_no_pools():
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    assert lib.modelmem_npu_pool_push(b"bert") == 1  # nothing to route
    assert lib.modelmem_npu_pool_pop() == 1


def child_planned_inferences():
    """Scenario (b): a static pool sized from the plan; the model's buffers of several inferences
    (from the plan's JSON: size, first and last step) served with no device call after the
    warm-up."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    with open(os.environ["PLAN_JSON"]) as f:
        plan = json.load(f)
    weights = lib.modelmem_npu_alloc(plan["weights_bytes"], 0, None)
    assert weights, lib.modelmem_npu_last_error()
    # Each inference runs the buffers of one bucket's plan (one plan without buckets).
    buckets = [plan["buffers"]]
    if os.environ.get("BUCKET_JSONS"):
        buckets = []
        for path in os.environ["BUCKET_JSONS"].split(","):
            with open(path) as f:
                buckets.append(json.load(f)["buffers"])
    device_allocs = []
    for inference in range(4 * len(buckets)):
        buffers = buckets[(inference * 7) % len(buckets)]  # the buckets in a mixed order
        last = max(b["end"] for b in buffers)
        live = {}
        for step in range(last + 2):
            for i in [i for i, b in live.items() if buffers[i]["end"] < step]:
                lib.modelmem_npu_free(live.pop(i), buffers[i]["size"], 0, None)
            for i, b in enumerate(buffers):
                if b["start"] == step:
                    p = lib.modelmem_npu_alloc(b["size"], 0, None)
                    assert p, (inference, step, lib.modelmem_npu_last_error())
                    live[i] = p
        assert not live
        device_allocs.append(stats(lib)["device_allocs"])
    n = len(device_allocs)
    assert device_allocs[1:] == [device_allocs[0]] * (n - 1), device_allocs  # none after warm-up
    print("device allocations:", device_allocs)
    print("describe:", lib.modelmem_npu_describe(0).decode())


def child_full_device():
    """Scenario (f): the device full; NULL with the numbers and what to change, then it works."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    held = []
    while True:
        p = lib.modelmem_npu_alloc(30 * MiB, 0, None)
        if not p:
            break
        held.append(p)
    print("error:", lib.modelmem_npu_last_error().decode())
    lib.modelmem_npu_free(held.pop(), 30 * MiB, 0, None)
    p = lib.modelmem_npu_alloc(30 * MiB, 0, None)
    assert p, lib.modelmem_npu_last_error()
    held.append(p)
    for p in held:
        lib.modelmem_npu_free(p, 30 * MiB, 0, None)


def child_mindspore():
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0  # MindSpore sets the device on its threads
    s = stream(acl)
    # A thread with no device current: MindSpore's functions have no device argument.
    seen = []

    def no_device():
        seen.append(lib.modelmem_ms_alloc(4096, s))
        seen.append(lib.modelmem_npu_last_error().decode())
    t = threading.Thread(target=no_device)
    t.start()
    t.join()
    assert seen[0] is None and "no NPU is current" in seen[1], seen
    alloc = lambda size: lib.modelmem_ms_alloc(size, s)
    free = lambda p, size: lib.modelmem_ms_free(p, size, s)
    blocks, live = random_use(alloc, free, random.Random(11), 2000, 24)
    assert lib.modelmem_ms_alloc(1 << 40, s) is None
    p = alloc(MiB)
    assert p
    free(p, MiB)
    for p in list(live):
        free(p, blocks.remove(p))
    assert stats(lib)["allocated"] == 0


def child_threads():
    """torch_npu allocates from several threads at once (ctypes releases the GIL in calls)."""
    acl, lib = load()
    errors = []
    lock = threading.Lock()
    ledger = Blocks()

    def worker(seed):
        try:
            assert acl.aclrtSetDevice(0) == 0
            rng, live = random.Random(seed), []
            for n in range(800):
                if live and rng.random() < 0.5:
                    p, size = live.pop(rng.randrange(len(live)))
                    with lock:
                        ledger.remove(p)
                    lib.modelmem_npu_free(p, size, 0, None)
                    continue
                size = int(2 ** rng.uniform(9, 22))
                p = lib.modelmem_npu_alloc(size, 0, None)
                assert p, lib.modelmem_npu_last_error().decode()
                with lock:
                    ledger.add(p, size, seed)
                live.append((p, size))
            for p, size in live:
                with lock:
                    ledger.remove(p)
                lib.modelmem_npu_free(p, size, 0, None)
        except Exception as e:  # reported by the main thread
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k + 1,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert stats(lib)["allocated"] == 0


def child_two_devices():
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    a = lib.modelmem_npu_alloc(5 * MiB, 1, None)
    b = lib.modelmem_npu_alloc(5 * MiB, 0, None)
    assert a and b
    assert "npu:1" in lib.modelmem_npu_describe(1).decode()
    assert stats(lib, 1)["allocated"] >= 5 * MiB
    lib.modelmem_npu_free(a, 5 * MiB, 1, None)
    lib.modelmem_npu_free(b, 5 * MiB, 0, None)
    # MindSpore frees on a thread whose current device is another one.
    assert acl.aclrtSetDevice(1) == 0
    c = lib.modelmem_ms_alloc(MiB, None)
    assert acl.aclrtSetDevice(0) == 0
    lib.modelmem_ms_free(c, MiB, None)
    assert stats(lib, 1)["allocated"] == 0
    assert stats(lib, 0)["allocated"] == 0


def child_fraction_before_first_allocation():
    acl, lib = load()
    lib.modelmem_npu_memory_fraction(0.25, 0)  # set_memory_fraction_fn, before any allocation
    assert lib.modelmem_npu_alloc(400 * MiB, 0, None) is None  # 1 GiB device, 256 MiB cap
    p = lib.modelmem_npu_alloc(100 * MiB, 0, None)
    assert p
    lib.modelmem_npu_free(p, 100 * MiB, 0, None)
    assert "per_process_memory_fraction 0.25" in lib.modelmem_npu_describe(0).decode()


def child_bad_config():
    acl, lib = load()
    lib.modelmem_npu_init(1)  # set_init_fn: the configuration's error is left to the allocation
    for _ in range(3):
        assert lib.modelmem_npu_alloc(4096, 0, None) is None  # never aborts
    print("why:", lib.modelmem_npu_last_error().decode())


def child_published():
    acl, lib = load()
    p = lib.modelmem_npu_alloc(30 * MiB, 0, None)
    assert p
    time.sleep(0.6)  # the publisher copies statistics every 200 ms
    out = subprocess.run([CLI, "info", "--json", "--pid", str(os.getpid())],
                         capture_output=True, text=True, check=True).stdout
    pools = json.loads(out)["processes"][0]["pools"]
    assert len(pools) == 1, pools
    pool = pools[0]
    assert pool["pool"] == "bert" and pool["device"] == "npu:0", pool
    assert pool["allocated"] >= 30 * MiB, pool
    lib.modelmem_npu_free(p, 30 * MiB, 0, None)


def child_published_pools():
    """Scenario (e): the pools of one NPU process, each on its own line of `modelmem info`."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    assert lib.modelmem_npu_pool_push(b"bert") == 0
    p = lib.modelmem_npu_alloc(30 * MiB, 0, None)
    assert p
    time.sleep(0.6)  # the publisher copies statistics every 200 ms
    out = subprocess.run([CLI, "info", "--json", "--pid", str(os.getpid())],
                         capture_output=True, text=True, check=True).stdout
    pools = {q["pool"]: q for q in json.loads(out)["processes"][0]["pools"]}
    assert set(pools) == {"npu", "bert", "resnet"}, pools
    assert all(q["device"] == "npu:0" for q in pools.values()), pools
    assert pools["bert"]["budget"] == 200 * MiB and pools["resnet"]["budget"] == 100 * MiB, pools
    assert pools["bert"]["allocated"] >= 30 * MiB and pools["resnet"]["allocated"] == 0, pools
    table = subprocess.run([CLI, "info", "--pid", str(os.getpid())], capture_output=True,
                           text=True, check=True).stdout
    print(table)
    # `modelmem top` once, not on a terminal (the npu-smi view, refreshed): every pool too.
    frame = subprocess.run([CLI, "top", "-n", "1"], capture_output=True, text=True, check=True,
                           timeout=60).stdout
    print("top:")
    print(frame)
    lib.modelmem_npu_free(p, 30 * MiB, 0, None)
    assert lib.modelmem_npu_pool_pop() == 0


def child_last_error_names_the_failed_free():
    """A failed free (a double free) replaces the thread's last error; it is never stale."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    assert lib.modelmem_npu_alloc(4096 * MiB, 0, None) is None
    assert "NPU out of memory" in lib.modelmem_npu_last_error().decode()
    p = lib.modelmem_npu_alloc(MiB, 0, None)
    assert p
    assert "NPU out of memory" in lib.modelmem_npu_last_error().decode()  # the last failure
    lib.modelmem_npu_free(p, MiB, 0, None)
    lib.modelmem_npu_free(p, MiB, 0, None)  # a double free
    why = lib.modelmem_npu_last_error().decode()
    assert why.startswith("free of 0x%x on npu:0 failed: " % p), why
    assert "NPU out of memory" not in why, why
    # MindSpore's free: the same.
    assert lib.modelmem_npu_alloc(4096 * MiB, 0, None) is None
    q = lib.modelmem_ms_alloc(MiB, None)
    assert q
    lib.modelmem_ms_free(q, MiB, None)
    lib.modelmem_ms_free(q, MiB, None)
    why = lib.modelmem_npu_last_error().decode()
    assert why.startswith("free of 0x%x failed: " % q), why
    # A free on a device without an allocator says so.
    lib.modelmem_npu_free(q, MiB, 5, None)
    why = lib.modelmem_npu_last_error().decode()
    assert why == "free of 0x%x on npu:5 failed: no allocator was built for this device" % q, why
    print("why:", why)


def child_listener():
    """A C listener registered through ctypes sees each alloc and free with its device, size,
    pool and stream; after removal it is never called again."""
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    s = stream(acl)
    seen = []

    def on_event(e, user):
        e = e.contents
        assert e.version == 1 and user == 42
        seen.append((KINDS[e.kind], e.device, e.device_name.decode(), e.pool,
                     e.pool_name.decode(), e.size, e.stream, e.address,
                     e.label.decode() if e.label else None))

    callback = LISTENER(on_event)
    assert lib.modelmem_npu_add_listener(LISTENER(), None) == -1  # no function
    assert "no function" in lib.modelmem_npu_last_error().decode()
    listener = lib.modelmem_npu_add_listener(callback, 42)
    assert listener >= 0, lib.modelmem_npu_last_error()
    assert lib.modelmem_npu_pool_push(b"bert") == 0
    p = lib.modelmem_npu_alloc(3 * MiB, 0, s)
    assert lib.modelmem_npu_alloc(300 * MiB, 0, s) is None  # over bert's quota
    assert lib.modelmem_npu_pool_pop() == 0
    q = lib.modelmem_npu_alloc(5000, 0, None)  # the main stack
    lib.modelmem_npu_begin_step(0)
    lib.modelmem_npu_free(p, 3 * MiB, 0, s)
    lib.modelmem_npu_free(q, 5000, 0, None)
    blocks = [e for e in seen if e[0] in ("alloc", "free")]
    assert blocks == [("alloc", 0, "npu:0", 1, "bert", 3 * MiB, s.value, p, None),
                      ("alloc", 0, "npu:0", 0, "npu", 5000, None, q, None),
                      ("free", 0, "npu:0", 1, "bert", 3 * MiB, s.value, p, None),
                      ("free", 0, "npu:0", 0, "npu", 5000, None, q, None)], blocks
    assert ("mark", 0, "npu:0", 0, "npu", 0, None, 0, "step_begin") in seen, seen
    # Removed: never called again; a second removal says so.
    assert lib.modelmem_npu_remove_listener(listener) == 0
    n = len(seen)
    lib.modelmem_npu_free(lib.modelmem_npu_alloc(MiB, 0, None), MiB, 0, None)
    assert len(seen) == n
    assert lib.modelmem_npu_remove_listener(listener) == -1
    assert "no listener %d is registered" % listener in lib.modelmem_npu_last_error().decode()
    # At most four at a time.
    ids = [lib.modelmem_npu_add_listener(callback, 42) for _ in range(5)]
    assert ids[:4] == [0, 1, 2, 3] and ids[4] == -1, ids
    assert "4 listeners are registered already" in lib.modelmem_npu_last_error().decode()
    for i in ids[:4]:
        assert lib.modelmem_npu_remove_listener(i) == 0
    print("events:", len(seen))


def child_memory_logger():
    """Scenario (e): modelmem.MemoryLogger records the NPU library's allocations as torch_npu
    makes them (ctypes, two models' pools on two threads), with device, size, pool, stream and
    the Python line that allocated; stopped, it records nothing more."""
    sys.path.insert(0, PYTHON_DIR)
    import modelmem
    acl, lib = load()
    assert acl.aclrtSetDevice(0) == 0
    s = stream(acl)
    sizes = {"bert": [3 * MiB, 700 * 1024], "resnet": [5 * MiB, 4096]}
    made = {}

    def model(name, steps):
        assert acl.aclrtSetDevice(0) == 0
        with modelmem.pool(name):
            for _ in range(steps):
                blocks = [lib.modelmem_npu_alloc(n, 0, s) for n in sizes[name]]  # model's line
                assert all(blocks), lib.modelmem_npu_last_error()
                made[name] = made.get(name, 0) + len(blocks)
                for b, n in zip(blocks, sizes[name]):
                    lib.modelmem_npu_free(b, n, 0, s)

    with modelmem.MemoryLogger() as log:
        threads = [threading.Thread(target=model, args=(name, 200)) for name in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        other = lib.modelmem_npu_alloc(MiB, 0, None)  # no pool selected: the main stack
        lib.modelmem_npu_free(other, MiB, 0, None)
    lib.modelmem_npu_free(lib.modelmem_npu_alloc(MiB, 0, None), MiB, 0, None)  # not recorded
    events = log.events()
    assert log.devices == ["npu:0"], log.devices
    assert len(log) == len(events)
    # Besides each block's alloc and free, what the pools reserve and return while logging
    # (segments, or pages mapped with virtual memory), so `analyze` of the log knows reserved.
    blocks = [e for e in events if e["event"] in ("alloc", "free")]
    device = {"segment_alloc", "segment_free", "map", "unmap"}
    assert all(e["event"] in device for e in events if e not in blocks), \
        {e["event"] for e in events}
    assert len(blocks) == 2 * (made["bert"] + made["resnet"] + 1), (len(blocks), made)
    for name in sizes:
        mine = [e for e in blocks if e["pool"] == name]
        assert len(mine) == 2 * made[name], (name, len(mine))
        assert all(e["device"] == "npu:0" and e["stream"] == s.value for e in mine)
        assert sorted({e["size"] for e in mine}) == sorted(sizes[name])
        allocs = [e for e in mine if e["event"] == "alloc"]
        assert {e["site"] for e in allocs} == {"npu_pluggable_test.py:%d <listcomp>" % LINE}, \
            {e["site"] for e in allocs}
    main = [e for e in blocks if e["pool"] == "npu"]
    assert [(e["event"], e["size"], e["stream"]) for e in main] == \
        [("alloc", MiB, 0), ("free", MiB, 0)], main
    # As a trace of the NPU: analyzed here, and saved for `modelmem analyze`.
    sites = log.analyze(device="npu:0").sites
    assert sites[0].site.startswith("npu_pluggable_test.py:"), sites
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "modelmem_npu_log_%d.csv" % os.getpid())
    log.save(path, device="npu:0")
    try:
        out = subprocess.run([CLI, "analyze", path], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        print(out.stdout)
    finally:
        os.unlink(path)
    try:
        log.trace(device="npu:1")
        raise AssertionError("a device without events was accepted")
    except modelmem.InvalidInputError as e:
        assert "no event on device 'npu:1' (seen: npu:0)" in str(e), e
    print("events:", len(events), "blocks:", len(blocks))


LINE = 0  # the line of child_memory_logger's allocations, found below


def _find_line():
    global LINE
    with open(os.path.abspath(__file__)) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith("# model's line"):
                LINE = n


_find_line()


# ---- the tests ----

def names_of(framework):
    path = os.path.join(SOURCE, "examples", "ascend", framework + "_example.py")
    with open(path) as f:
        return set(re.findall(r"modelmem_\w+", f.read()))


def run_child(name, **env):
    e = dict(os.environ)
    e.setdefault("MODELMEM_MONITOR", "0")
    e.update({"MODELMEM_ACL_LIBRARY": ACL, "MODELMEM_EMULATED_ACL_MEMORY_MB": "1024"})
    for k in ("MODELMEM_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
              "MODELMEM_EMULATED_ACL_VMM"):
        e.pop(k, None)
    e.update(env)
    return subprocess.run([sys.executable, os.path.abspath(__file__), name], env=e,
                          capture_output=True, text=True, timeout=240)


@unittest.skipUnless(LIB and ACL, "MODELMEM_NPU_ALLOC and MODELMEM_EMULATED_ACL are not set")
class NpuPluggable(unittest.TestCase):
    def check(self, name, **env):
        r = run_child(name, **env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_exports_what_the_frameworks_and_examples_name(self):
        lib = ctypes.CDLL(LIB)
        for name in EXPORTS:
            self.assertTrue(hasattr(lib, name), name)
        # Nothing of modelmem's C++ leaks out of the library.
        out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True,
                             text=True).stdout
        if out:
            names = [line.split()[-1] for line in out.splitlines() if " T " in line]
            self.assertEqual(sorted(n for n in names if n.startswith("modelmem_")),
                             sorted(EXPORTS))
            self.assertFalse([n for n in names if n.startswith("_Z")], names[:5])

    def test_torch_npu_caching(self):
        r = self.check("child_torch_npu")
        self.assertIn("describe: caching on npu:0", r.stdout)
        self.assertIn("set_memory_fraction(0.5) on npu:0 after its first allocation is not "
                      "applied", r.stderr)

    def test_torch_npu_expandable_segments(self):
        r = self.check("child_torch_npu", MODELMEM_ALLOC_CONF="expandable_segments:True")
        self.assertIn("describe: caching on npu:0: expandable segments (page 2.00 MiB)",
                      r.stdout)
        self.assertNotIn("not supported", r.stderr)

    def test_torch_npu_static_pool(self):
        r = self.check("child_torch_npu",
                       MODELMEM_ALLOC_CONF="strategy:static,static_pool_mb:900")
        self.assertIn("describe: static: one pool of 900.00 MiB on npu:0", r.stdout)

    def test_torch_npu_conf_without_virtual_memory_warns_once_and_falls_back_like_torch_npu(self):
        for vmm in ("unsupported", "absent"):
            r = self.check("child_torch_npu", PYTORCH_NPU_ALLOC_CONF="expandable_segments:True",
                           MODELMEM_EMULATED_ACL_VMM=vmm)
            lines = [l for l in r.stderr.splitlines() if "expandable_segments" in l]
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn("modelmem: expandable_segments is not supported on npu:0 (", lines[0])
            self.assertIn("falling back to the caching pool with fixed-size segments", lines[0])
            self.assertIn("207000" if vmm == "unsupported" else "lacks aclrtReserveMemAddress",
                          lines[0])
            self.assertIn("warning: " + lines[0], r.stdout)

    def test_the_seeds_setting_works_by_default_on_every_device(self):
        for vmm in ("present", "unsupported", "absent"):
            for mb in ("256", "1024", "16384", "65536"):
                r = self.check("child_seed", MODELMEM_ALLOC_CONF="expandable_segments:True",
                               MODELMEM_EMULATED_ACL_VMM=vmm, MODELMEM_EMULATED_ACL_MEMORY_MB=mb)
                lines = [l for l in r.stderr.splitlines() if "expandable_segments" in l]
                if vmm == "present":
                    self.assertEqual(lines, [], r.stderr)
                    self.assertIn("describe: caching on npu:0: expandable segments", r.stdout)
                    self.assertIn("warning: \n", r.stdout)
                    continue
                self.assertEqual(len(lines), 1, (vmm, mb, r.stderr))
                self.assertIn("expandable_segments is not supported on npu:0 (", lines[0])
                self.assertIn("falling back to the caching pool with fixed-size segments",
                              lines[0])
                self.assertIn("warning: " + lines[0], r.stdout)
                self.assertIn("describe: caching on npu:0: small", r.stdout)

    def test_every_torch_npu_key_is_accepted_with_one_line_where_mapped(self):
        # torch_npu accepts each of these strings; each serves every allocation, and a key
        # modelmem cannot honour is said once, in one line, whatever the number of allocations.
        cases = [("page_size:1g", "page_size:1g: no 1 GiB pages", "large from 20.00 MiB"),
                 ("large_segment_size_mb:64", None, "large from 64.00 MiB segments"),
                 ("expandable_segments:True,base_addr_aligned_kb:16",
                  "base_addr_aligned_kb:16: blocks stay 512-byte aligned", "expandable segments"),
                 ("expandable_segments:False,multi_stream_lazy_reclaim:True",
                  "multi_stream_lazy_reclaim:True: nothing to defer", "large from 20.00 MiB"),
                 ("expandable_segments:True,segment_size_mb:40",
                  "segment_size_mb:40: expandable segments map the large pool",
                  "expandable segments"),
                 ("pinned_use_background_threads:True,release_lock_on_npumalloc:False",
                  "pinned_use_background_threads:True: host pinned memory", "caching on npu:0")]
        for conf, note, describe in cases:
            r = self.check("child_torch_npu", PYTORCH_NPU_ALLOC_CONF=conf)
            lines = [l for l in r.stderr.splitlines() if "PYTORCH_NPU_ALLOC_CONF" in l]
            self.assertNotIn("cannot build", r.stderr, conf)
            self.assertIn(describe, r.stdout, conf)
            if note is None:
                self.assertEqual(lines, [], conf)
                continue
            self.assertEqual(len(lines), 1, (conf, r.stderr))
            self.assertTrue(lines[0].startswith("modelmem: PYTORCH_NPU_ALLOC_CONF: "), lines[0])
            self.assertIn(note, lines[0])

    def test_what_torch_npu_refuses_fails_at_the_first_allocation_and_every_null_says_why(self):
        r = self.check("child_bad_config",
                       PYTORCH_NPU_ALLOC_CONF="expandable_segments:True,max_split_size_mb:64")
        why = ("`max_split_size_mb` or `garbage_collection_threshold`, cannot be enabled with "
               "`expandable_segments`, please set `expandable_segments` to `False`")
        self.assertIn("why: no allocator for npu:0: PYTORCH_NPU_ALLOC_CONF: " + why, r.stdout)
        errors = r.stderr.splitlines()
        self.assertEqual(r.stderr.count("cannot build the allocator for npu:0"), 1, r.stderr)
        self.assertIn(why, errors[0])  # at the first allocation
        self.assertEqual(len(errors), 3, r.stderr)  # three NULLs, three lines
        self.assertTrue(all(why in e for e in errors), r.stderr)

    def test_pools_of_several_models_in_one_process(self):
        r = self.check("child_pools", MODELMEM_ALLOC_CONF="device:npu,pools:[bert:200,resnet:100]")
        self.assertIn("why: pools: no pool named 'nope' (pools: bert, resnet)", r.stdout)
        self.assertIn("describe: pools(bert=200.00 MiB, resnet=100.00 MiB", r.stdout)
        # On an NPU without virtual memory, expandable segments fall back once for all pools.
        r = self.check("child_pools", MODELMEM_EMULATED_ACL_VMM="unsupported",
                       MODELMEM_ALLOC_CONF="device:npu,expandable_segments:True,"
                                           "pools:[bert:200,resnet:100]")
        self.assertEqual(r.stderr.count("expandable_segments is not supported"), 1, r.stderr)
        self.check("child_no_pools")

    @unittest.skipUnless(SOURCE and CLI, "MODELMEM_SOURCE_DIR or MODELMEM_CLI is not set")
    def test_scenario_static_pool_from_the_plan_serves_inferences_without_device_calls(self):
        for model, dims in (("resnet50", ["batch=2"]), ("bert_base", ["batch=1", "seq=128"])):
            path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                "modelmem_npu_%d_%s.json" % (os.getpid(), model))
            argv = [CLI, "plan", os.path.join(SOURCE, "models", model + ".onnx"), "-o", path]
            for d in dims:
                argv += ["--dim", d]
            subprocess.run(argv, check=True, capture_output=True)
            try:
                r = self.check("child_planned_inferences", PLAN_JSON=path,
                               MODELMEM_ALLOC_CONF="device:npu,strategy:static,plan:%s,"
                                                   "safety_factor:1.2" % path)
            finally:
                os.unlink(path)
            self.assertIn("describe: static: one pool of", r.stdout)
            self.assertIn("device allocations: [1, 1, 1, 1]", r.stdout)

    @unittest.skipUnless(SOURCE and CLI, "MODELMEM_SOURCE_DIR or MODELMEM_CLI is not set")
    def test_scenario_bucketed_inputs_served_from_one_pool(self):
        # Scenario (d): plan --buckets sizes one pool for every batch size; each bucket's own
        # plan gives the buffers an inference of that size asks for.
        model = os.path.join(SOURCE, "models", "resnet50.onnx")
        base = os.path.join(os.environ.get("TMPDIR", "/tmp"), "modelmem_npu_%d" % os.getpid())
        pool_json, bucket_jsons = base + "_buckets.json", []
        try:
            subprocess.run([CLI, "plan", model, "--buckets", "batch=1,2,4", "-o", pool_json],
                           check=True, capture_output=True)
            for n in (1, 2, 4):
                bucket_jsons.append("%s_b%d.json" % (base, n))
                subprocess.run([CLI, "plan", model, "--dim", "batch=%d" % n, "-o",
                                bucket_jsons[-1]], check=True, capture_output=True)
            r = self.check("child_planned_inferences", PLAN_JSON=pool_json,
                           BUCKET_JSONS=",".join(bucket_jsons),
                           MODELMEM_ALLOC_CONF="device:npu,strategy:static,plan:%s,"
                                               "safety_factor:1.2" % pool_json)
        finally:
            for path in [pool_json] + bucket_jsons:
                if os.path.exists(path):
                    os.unlink(path)
        self.assertIn("device allocations: [%s]" % ", ".join(["1"] * 12), r.stdout)

    def test_scenario_full_device_says_the_numbers_and_what_to_change(self):
        r = self.check("child_full_device", MODELMEM_EMULATED_ACL_MEMORY_MB="256")
        self.assertRegex(r.stdout, r"error: NPU out of memory: out of memory in caching pool on "
                                   r"npu:0: requested 30\.00 MiB, device free [0-9.]+ MiB, "
                                   r"reserved [0-9.]+ MiB, allocated [0-9.]+ MiB")
        self.assertIn("to change: the device is full", r.stdout)
        r = self.check("child_pools", MODELMEM_ALLOC_CONF="device:npu,pools:[bert:200,resnet:100]",
                       MODELMEM_VERBOSE="1")
        # Each pool's refusal gives the quota that serves its request (150 + 100, 80 + 30 MiB).
        self.assertIn("to change: a quota of at least 250 MiB (pools:[bert:250,...])", r.stderr)
        self.assertIn("to change: a quota of at least 110 MiB (pools:[resnet:110,...])", r.stderr)

    def test_mindspore(self):
        self.check("child_mindspore")
        self.check("child_mindspore", MODELMEM_ALLOC_CONF="expandable_segments:True")

    def test_threads(self):
        self.check("child_threads")
        self.check("child_threads", MODELMEM_ALLOC_CONF="expandable_segments:True")

    def test_two_devices(self):
        self.check("child_two_devices", MODELMEM_EMULATED_ACL_DEVICES="2")

    def test_memory_fraction_before_the_first_allocation(self):
        self.check("child_fraction_before_first_allocation")

    def test_bad_config_returns_null_and_says_why_each_time(self):
        r = self.check("child_bad_config", MODELMEM_ALLOC_CONF="bogus:1")
        self.assertEqual(r.stderr.count("cannot build the allocator for npu:0"), 1, r.stderr)
        self.assertEqual(r.stderr.count("config: unknown key 'bogus'"), 3, r.stderr)
        self.assertIn("why: no allocator for npu:0: config: unknown key 'bogus'", r.stdout)

    @unittest.skipUnless(SOURCE, "MODELMEM_SOURCE_DIR is not set")
    def test_examples_parse_and_name_what_the_library_exports(self):
        lib = ctypes.CDLL(LIB)
        for example in ("torch_npu_example.py", "mindspore_example.py"):
            path = os.path.join(SOURCE, "examples", "ascend", example)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str) and re.fullmatch(r"modelmem_\w+", n.value)}
            names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and n.attr.startswith("modelmem_")}
            self.assertTrue(names, example)
            for name in names:
                self.assertTrue(hasattr(lib, name), "%s names %s" % (example, name))
        self.assertTrue({"modelmem_npu_alloc", "modelmem_npu_free"} <= names_of("torch_npu"))
        self.assertTrue({"modelmem_ms_alloc", "modelmem_ms_free"} <= names_of("mindspore"))

    @unittest.skipUnless(SOURCE and CLI, "MODELMEM_SOURCE_DIR or MODELMEM_CLI is not set")
    def test_scenarios_build_on_the_emulated_npu(self):
        # At the emulated runtime's default capacity (1 GiB), in each virtual-memory mode.
        env = dict(os.environ, MODELMEM_ACL_LIBRARY=ACL, MODELMEM_MONITOR="0")
        env.pop("MODELMEM_EMULATED_ACL_MEMORY_MB", None)
        for vmm in ("present", "unsupported"):
            env["MODELMEM_EMULATED_ACL_VMM"] = vmm
            self.scenarios(env, vmm)

    def scenarios(self, env, vmm):
        r = subprocess.run(["sh", "examples/ascend/scenarios.sh", CLI], cwd=SOURCE, env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 8, r.stdout)
        self.assertTrue(all(l.startswith("allocator: ") and "npu:0" in l for l in lines),
                        r.stdout)
        if vmm == "present":
            self.assertIn("expandable segments", lines[0])
        else:
            self.assertIn("small <= 1.00 MiB", lines[0])  # the caching fallback
            self.assertEqual(r.stderr.count("expandable_segments is not supported"), 1, r.stderr)
        self.assertIn("static: one pool of", lines[1])  # sized from the plan
        self.assertIn("pools(resnet50=", lines[4])  # from plan --device-memory
        self.assertIn("bert_base=", lines[4])
        self.assertIn("planned(", lines[7])

    @unittest.skipUnless(CLI, "MODELMEM_CLI is not set")
    def test_published_to_the_monitor(self):
        self.check("child_published", MODELMEM_MONITOR="1", MODELMEM_POOL_NAME="bert")

    @unittest.skipUnless(CLI, "MODELMEM_CLI is not set")
    def test_pools_of_one_process_each_published_with_its_quota(self):
        # Scenario (e): `modelmem info` and `modelmem top` as the seed's npu-smi view.
        r = self.check("child_published_pools", MODELMEM_MONITOR="1",
                       MODELMEM_ALLOC_CONF="device:npu,pools:[bert:200,resnet:100]")
        info, top = r.stdout.split("\ntop:\n")
        for view in (info, top):
            self.assertRegex(view, r"bert\s+npu:0")
            self.assertRegex(view, r"resnet\s+npu:0")
            self.assertRegex(view, r"npu:0: [0-9.]+[KMGT]? total")  # the device's HBM line
        self.assertIn("python", top)

    def test_last_error_names_the_failed_free(self):
        self.check("child_last_error_names_the_failed_free")

    def test_listener_sees_device_size_pool_and_stream(self):
        self.check("child_listener", MODELMEM_ALLOC_CONF="device:npu,pools:[bert:200,resnet:100]")

    @unittest.skipUnless(PYTHON_DIR and CLI, "MODELMEM_PYTHON_DIR (the modelmem package's build "
                         "folder) or MODELMEM_CLI is not set")
    def test_scenario_memory_logger_records_the_npu_librarys_allocations(self):
        # Scenario (e): allocation logging of NPU memory, as the seed asks, with and without
        # virtual memory (the fallback's one warning, then the same log).
        for vmm in ("present", "unsupported"):
            r = self.check("child_memory_logger", MODELMEM_EMULATED_ACL_VMM=vmm,
                           MODELMEM_ALLOC_CONF="device:npu,expandable_segments:True,"
                                               "pools:[bert:200,resnet:100]")
            self.assertIn("blocks: 1602", r.stdout)
            self.assertIn("npu_pluggable_test.py:%d" % LINE, r.stdout)  # analyze's top site
            warned = r.stderr.count("expandable_segments is not supported")
            self.assertEqual(warned, 0 if vmm == "present" else 1, r.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("child_"):
        globals()[sys.argv[1]]()
    else:
        unittest.main()
