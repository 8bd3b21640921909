#!/usr/bin/env python3
"""Writes memory snapshots in the layout of PyTorch's torch.cuda.memory._dump_snapshot and of
torch_npu's (see docs/snapshots.md), with Python's pickle module only: Debian's
torch 1.13 on CPU cannot record one. Used by tests/trace/snapshot_test.cpp, tests/python and the
fuzzer's seeds. Usage: make_snapshots.py OUTDIR
"""
import os
import pickle
import sys

MiB = 1 << 20
A = 0x7F0000000000  # a segment that existed before the recorded history
B = 0x7F0002000000  # a segment allocated during it


def frames(*sites):
    return [{"filename": f, "line": l, "name": n} for f, l, n in sites]


RELU = ("/usr/lib/python3/dist-packages/torch/nn/functional.py", 1457, "relu")
FWD12 = ("/home/user/model.py", 12, "forward")
FWD13 = ("/home/user/model.py", 13, "forward")
FWD20 = ("/home/user/model.py", 20, "forward")


def cuda_snapshot(timed=True, npu=False):
    events = []
    t = [100]

    def ev(action, addr, size, fr=(), **extra):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames(*fr)}
        if timed:
            e["time_us"] = t[0]
        if npu:
            e["pool_id"] = 0
        e.update(extra)
        t[0] += 10
        events.append(e)

    # A block allocated before the history began, freed in it.
    ev("free_requested", A + MiB, 4 * MiB)
    ev("free_completed", A + MiB, 4 * MiB)
    for _ in range(3):
        ev("alloc", A + MiB, 4 * MiB, (RELU, FWD12))
        ev("alloc", A + 5 * MiB, 8 * MiB, (FWD13,))
        ev("free_requested", A + MiB, 4 * MiB)
        ev("free_completed", A + MiB, 4 * MiB)
        ev("free_requested", A + 5 * MiB, 8 * MiB)
        ev("free_completed", A + 5 * MiB, 8 * MiB)
    ev("segment_alloc", B, 2 * MiB)
    ev("alloc", B, 512 * 1024, (FWD20,))
    ev("oom", 0, 1 << 30, device_free=3 * MiB)
    ev("workspace_snapshot" if npu else "snapshot", 0, 0)
    segments = [
        {"device": 0, "address": A, "total_size": 20 * MiB, "allocated_size": MiB,
         "active_size": MiB, "requested_size": MiB, "stream": 0, "segment_type": "large",
         "is_expandable": False, "frames": [],
         "blocks": [
             {"address": A, "size": MiB, "requested_size": MiB, "state": "active_allocated",
              "frames": frames(("/home/user/load.py", 3, "load_weights"))},
             {"address": A + MiB, "size": 19 * MiB, "requested_size": 0, "state": "inactive",
              "frames": []}]},
        {"device": 0, "address": B, "total_size": 2 * MiB, "allocated_size": 512 * 1024,
         "active_size": 512 * 1024, "requested_size": 512 * 1024, "stream": 0,
         "segment_type": "large", "is_expandable": False, "frames": [],
         # No block addresses: older PyTorch; they follow from the segment's address.
         "blocks": [
             {"size": 512 * 1024, "requested_size": 512 * 1024, "state": "active_allocated",
              "frames": frames(FWD20)},
             {"size": 1536 * 1024, "requested_size": 0, "state": "inactive", "frames": []}]},
    ]
    snap = {"segments": segments, "device_traces": [events]}
    if not npu:
        snap["allocator_settings"] = {"expandable_segments": False}
    return snap


C = 0x7F0100000000  # a segment of the KV-cache pool (0, 1)
CPP = [  # the C++ frames PyTorch 2.x records before the Python ones (context "all")
    {"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
    {"filename": "memory_snapshot.cpp", "line": 0,
     "name": "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
    {"filename": "", "line": 0,
     "name": "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)"},
    {"filename": "??", "line": 0, "name": "_PyEval_EvalFrameDefault"},
    {"filename": "C:\\venv\\Lib\\site-packages\\torch\\nn\\modules\\module.py", "line": 1790,
     "name": "_call_impl"},
    {"filename": "/usr/lib/python3.10/copy.py", "line": 153, "name": "deepcopy"},
]


def pools_snapshot():
    """Two pools (segment_pool_id), one a KV cache below C++ and PyTorch frames, a block freed
    but waiting for its stream, and profiler annotations: three ProfilerStep#N and a repeating
    zero_grad (ProfilerStep wins)."""
    kv = CPP + frames(("/venv/vllm/worker/cache_engine.py", 83, "_allocate_kv_cache"))
    weights = CPP + frames(("C:\\work\\train.py", 7, "build"))
    segments = [
        {"device": 0, "address": A, "total_size": 20 * MiB, "stream": 0,
         "segment_pool_id": (0, 0), "segment_type": "large",
         "blocks": [
             {"address": A, "size": 2 * MiB, "requested_size": 2 * MiB - 100,
              "state": "active_allocated", "frames": weights},
             {"address": A + 2 * MiB, "size": MiB, "requested_size": MiB,
              "state": "active_pending_free", "frames": []},
             {"address": A + 3 * MiB, "size": 17 * MiB, "requested_size": 0, "state": "inactive",
              "frames": []}]},
        {"device": 0, "address": C, "total_size": 64 * MiB, "stream": 0,
         "segment_pool_id": [0, 1], "segment_type": "large",
         "blocks": [
             {"address": C, "size": 64 * MiB, "requested_size": 64 * MiB,
              "state": "active_allocated", "frames": kv}]},
    ]
    events, annotations = [], []
    t = 1000
    for step in range(3):
        annotations.append({"name": f"ProfilerStep#{step + 1}", "stage": "START", "device": 0,
                            "time_us": t})
        annotations.append({"name": "Optimizer.zero_grad#SGD.zero_grad", "stage": "START",
                            "device": 0, "time_us": t + 1})
        annotations.append({"name": "Optimizer.zero_grad#SGD.zero_grad", "stage": "END",
                            "device": 0, "time_us": t + 2})
        for k, (action, size) in enumerate([("alloc", 4 * MiB), ("free_requested", 4 * MiB),
                                            ("free_completed", 4 * MiB)]):
            events.append({"action": action, "addr": A + 4 * MiB, "size": size, "stream": 0,
                           "time_us": t + 3 + k, "frames": weights})
        annotations.append({"name": f"ProfilerStep#{step + 1}", "stage": "END", "device": 0,
                            "time_us": t + 9})
        t += 10
    return {"segments": segments, "device_traces": [events], "external_annotations": annotations,
            "allocator_settings": {}}


def hostile_snapshot():
    """A history that cannot be true: a double free, a block over a live one, an address whose
    range wraps past 2^64, and an event recorded before the one above it."""
    events = []

    def ev(action, addr, size, t):
        events.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                       "frames": []})

    ev("alloc", B, MiB, 100)
    ev("free_requested", B, MiB, 110)
    ev("free_completed", B, MiB, 111)
    ev("free_requested", B, MiB, 120)  # again: a double free
    ev("alloc", B, 4 * MiB, 130)
    ev("alloc", B + MiB, MiB, 140)  # inside the live 4 MiB block
    ev("alloc", 2**64 - 4096, 8192, 150)  # wraps past 2^64
    ev("free_requested", 2**64 - 4096, 8192, 155)
    ev("alloc", B + 8 * MiB, 2 * MiB, 145)  # before the event above it
    ev("free_requested", B, 4 * MiB, 160)
    ev("free_requested", B + MiB, MiB, 170)
    ev("free_requested", B + 8 * MiB, 2 * MiB, 180)
    return {"segments": [], "device_traces": [events]}


def same_time_snapshot(n=3000):
    """n alloc/free pairs all at one time_us."""
    events = []
    for i in range(n):
        for action in ("alloc", "free_requested"):
            events.append({"action": action, "addr": B + i * MiB, "size": MiB, "stream": 0,
                           "time_us": 5, "frames": []})
    return {"segments": [], "device_traces": [events]}


class Boom:
    """Pickles as a call of os.system: a reader that executes pickles would run it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, ("touch " + self.path,))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def write(name, obj, protocol=4):
        with open(os.path.join(out, name), "wb") as f:
            pickle.dump(obj, f, protocol=protocol)

    for p in (2, 3, 4, 5):
        write(f"cuda_p{p}.pickle", cuda_snapshot(), protocol=p)
    write("npu.pickle", cuda_snapshot(timed=False, npu=True))
    write("segments_only.pickle", {"segments": cuda_snapshot()["segments"]})
    write("pools.pickle", pools_snapshot())
    write("not_snapshot.pickle", {"hello": [1, 2, 3]})
    write("hostile.pickle", hostile_snapshot())
    write("same_time.pickle", same_time_snapshot())
    write("evil.pickle", {"segments": [], "device_traces": [[Boom(os.path.join(out, "pwned"))]]})
    with open(os.path.join(out, "truncated.pickle"), "wb") as f:
        f.write(pickle.dumps(cuda_snapshot(), protocol=4)[:200])
    # Python objects of every kind the reader knows, for the pickle unit test.
    values = {"none": None, "t": True, "f": False, "small": 7, "neg": -300, "i32": -(2**31),
              "big": 2**40 + 5, "u64": 2**64 - 1, "float": 1.5, "str": "h\u00e9llo", "bytes": b"\x00\x01",
              "list": [1, [2, 3]], "tuple": (1, 2, 3, 4), "t1": (1,), "t2": (1, 2), "t3": (1, 2, 3),
              "empty": ()}
    shared = ["shared"]
    values["alias"] = [shared, shared]
    for p in (3, 5):
        write(f"values_p{p}.pickle", values, protocol=p)


if __name__ == "__main__":
    main()
