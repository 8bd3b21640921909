"""modelmem.torch, modelmem.pool and modelmem.MemoryLogger with Debian's PyTorch (CPU). Each test
runs its script in a fresh python3: modelmem's CPU allocator is one per process."""
import os
import textwrap

import modelmem
from conftest import CLI, SOURCE, needs_build_tree, needs_torch, run_python


def check(code, **kw):
    r = run_python(textwrap.dedent(code), **kw)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_without_torch_allocator_pool_and_logger_say_what_they_need():
    # A pool can be made first (it may route an NPU or CUDA library's allocations); entering it
    # with nothing to route says what it needs. In a fresh python3, like every test here: in
    # pytest's own process another test may have loaded a device library (test_install does).
    check("""
        import modelmem
        for make in (lambda: modelmem.pool("early", 1 << 20), modelmem.MemoryLogger):
            try:
                with make():
                    pass
            except modelmem.UnsupportedError as e:
                assert "use_cpu_allocator" in str(e), e
            else:
                raise AssertionError("entered without an allocator")
        """)


@needs_torch
def test_cpu_allocator_stats_report_steps_and_trace(tmp_path):
    out = check(f"""
        import torch, modelmem, modelmem.torch as mt
        before = torch.ones(1000)          # made by PyTorch's own allocator
        h = mt.use_cpu_allocator("strategy:caching")
        x = torch.empty(1 << 20)
        s = h.stats()
        assert s["allocated_bytes.all.current"] >= 4 << 20, s
        assert s["reserved_bytes.all.peak"] >= s["allocated_bytes.all.current"]
        for k in ("num_alloc_retries", "num_ooms", "allocation.all.current",
                  "requested_bytes.large_pool.peak", "segment.all.current"):
            assert k in s, k
        with h.step():
            y = x * 2
        del before                          # freed by its own deleter
        with h.trace({str(tmp_path / 't.csv')!r}) as rec:
            z = torch.zeros(1000)
            del z
        t = modelmem.Trace.load({str(tmp_path / 't.csv')!r})
        assert len(t) >= 2, len(t)
        assert "caching" in h.report() and "allocated" in h.report()
        assert "caching" in h.describe()
        assert mt.use_cpu_allocator("strategy:caching").config == "strategy:caching"
        try:
            mt.use_cpu_allocator("strategy:planned")
        except modelmem.UnsupportedError as e:
            assert "already" in str(e)
        else:
            raise AssertionError("second config accepted")
        for bad, needle in [("", "a file name is needed"),
                            ("/nonexistent/d/x.csv", "folder /nonexistent/d does not exist"),
                            ({str(tmp_path)!r}, "is a directory")]:
            try:
                h.trace(bad)             # refused at once, not at stop() after the recording
            except modelmem.InvalidInputError as e:
                assert needle in str(e), e
            else:
                raise AssertionError("trace path accepted: " + bad)
        with h.trace({str(tmp_path / 'again.csv')!r}):  # a refused path left no recording behind
            pass
        me = [p for p in modelmem.info() if p["pid"] == __import__("os").getpid()]
        assert me and me[0]["pools"][0]["pool"] == "libtorch", me
        print("ok")
    """)
    assert out.strip() == "ok"


@needs_torch
def test_bad_config_for_the_cpu_allocator():
    out = check("""
        import modelmem, modelmem.torch as mt
        try:
            mt.use_cpu_allocator("strategy:wrong")
        except modelmem.ConfigError as e:
            assert "strategy" in str(e)
            print("config error")
        try:
            mt.use_cpu_allocator(7)
        except ValueError:
            print("value error")
    """)
    assert out.split() == ["config", "error", "value", "error"]


@needs_torch
def test_planned_arena_makes_no_os_calls_in_steady_steps():
    out = check("""
        import torch, modelmem.torch as mt
        h = mt.use_cpu_allocator("strategy:planned,planned_steps:marked")
        w = torch.randn(256, 256)
        def work():
            a = torch.randn(64, 256) @ w
            b = torch.relu(a) @ w
            return float(b.sum())
        def step():
            with h.step():
                return work()    # every tensor of the step dies inside it
        for _ in range(5):
            step()
        before = h.stats()["num_device_alloc"]
        for _ in range(5):
            step()
        print(h.stats()["num_device_alloc"] - before)
        assert "plans made" in h.report() and "from the arena" in h.report()
        import re
        m = re.search(r"step faults +([0-9]+) of ([0-9]+) steps served by the plan had no page "
                      r"fault", h.report())
        print(m.group(1), m.group(2))
    """)
    calls, faults = out.strip().split("\n")
    assert calls == "0"
    faultless, served = map(int, faults.split())
    # the kernel's count is the process's: another test filling memory beside this one can make
    # it fault a reclaimed page back in one step (seen under CTest -j2)
    assert served >= 5 and faultless >= served - 1, out


@needs_torch
def test_pools_with_quotas():
    out = check(f"""
        import torch, modelmem, modelmem.torch as mt
        mt.use_cpu_allocator("strategy:caching")
        with modelmem.pool("small", quota=8 << 20) as p:
            x = torch.empty(1 << 20)         # 4 MiB: fits
            assert p.used >= 4 << 20, p.used
            try:
                y = torch.empty(2 << 20)     # 8 MiB more: over the quota
            except RuntimeError as e:
                msg = str(e)
                assert "small" in msg and "quota" in msg, msg
                # A CPU allocation: PyTorch's CPU out-of-memory error (RuntimeError), not
                # torch.cuda.OutOfMemoryError, and no device figure nobody measured.
                assert type(e) is RuntimeError, type(e)
                assert "device free" not in msg, msg
                print("quota breach")
        assert modelmem.pool("small", quota=8 << 20) is not None
        free = torch.empty(4 << 20)          # outside the pool: no quota
        big = modelmem.pool("big")
        with big:
            z = torch.empty(4 << 20)
        assert big.quota is None and big.stats()["allocated_bytes.all.current"] >= 16 << 20
        del x                                # freed after its pool was left
        assert p.used == 0, p.used
        for bad in [("small", 1 << 20), ("", None), ("a b", None), ("q", 0), ("q", -5), ("q", "1"),
                    ("q", 10**30)]:
            try:
                modelmem.pool(*bad)
            except ValueError as e:
                assert "Unable to cast" not in str(e), e
            else:
                raise AssertionError(bad)
        try:
            modelmem.pool("q", 10**30)
        except modelmem.InvalidInputError as e:
            assert str(e) == ("pool 'q': quota 1000000000000000000000000000000 is out of range: "
                              "from 1 byte to 8 EiB (2^63 bytes)"), e
        names = {{q["pool"]: q for proc in modelmem.info() if proc["pid"] == __import__("os").getpid()
                  for q in proc["pools"]}}
        assert names["small"]["budget"] == 8 << 20 and "big" in names, names
        import subprocess
        cli = subprocess.run([{CLI!r}, "info"], capture_output=True, text=True).stdout
        assert "small" in cli and "big" in cli and "libtorch" in cli, cli
        # The package renders with the CLI's own code: this process's rows are the same.
        me = __import__("os").getpid()
        rows = lambda text: [l for l in text.splitlines() if l.startswith(f"{{me}} ")]
        cli_me = subprocess.run([{CLI!r}, "info", "-p", str(me)], capture_output=True,
                                text=True).stdout
        assert rows(cli_me) and rows(modelmem.info_report(devices=False, pid=me)) == rows(cli_me)
        print("ok")
    """)
    assert out.split() == ["quota", "breach", "ok"]


@needs_torch
def test_memory_logger_records_python_callers(tmp_path):
    out = check(f"""
        import torch, modelmem, modelmem.torch as mt
        mt.use_cpu_allocator("strategy:caching")
        def make():
            return torch.empty(1 << 18)      # the line MemoryLogger should name
        with modelmem.MemoryLogger() as log:
            keep = [make() for _ in range(10)]
            del keep
        assert log.stacks and len(log) >= 20, len(log)
        a = log.analyze()
        top = a.sites[0]
        assert top.site == "<string>:5 make" and top.allocs == 10, a.sites
        log.save({str(tmp_path / 'log.csv')!r})
        t = modelmem.Trace.load({str(tmp_path / 'log.csv')!r})
        assert t.analyze().sites[0].site == top.site
        assert len(log.trace()) == len(log) == len(log.trace(device="cpu"))
        assert log.devices == ["cpu"]
        # Each event with its device and pool: the allocator's own, and a pool made here.
        with modelmem.MemoryLogger() as pools_log:
            a = torch.empty(1 << 16)
            with modelmem.pool("side", quota=1 << 22):
                b = torch.empty(1 << 17)
            del a, b
        got = [(e["event"], e["device"], e["pool"], e["size"]) for e in pools_log.events()
               if e["event"] in ("alloc", "free")]
        assert ("alloc", "cpu", "libtorch", 1 << 18) in got, got
        assert ("alloc", "cpu", "side", 1 << 19) in got, got
        assert [e["site"] for e in pools_log.events()
                if e["pool"] == "side" and e["event"] == "alloc"] == ["<string>:22 <module>"], \
            pools_log.events()
        try:
            with modelmem.MemoryLogger(), modelmem.MemoryLogger():
                pass
        except modelmem.UnsupportedError as e:
            assert "another MemoryLogger" in str(e)
        else:
            raise AssertionError("two loggers")
        print("ok")
    """)
    assert out.strip() == "ok"


@needs_torch
def test_cuda_and_npu_allocators_say_what_is_missing():
    out = check("""
        import modelmem, modelmem.torch as mt
        try:
            mt.cuda_allocator("strategy:caching")
        except modelmem.CudaAllocatorUnavailable as e:
            assert isinstance(e, NotImplementedError)
            print(e)
        try:
            mt.npu_allocator()
        except modelmem.NpuAllocatorUnavailable as e:
            assert isinstance(e, NotImplementedError)
            print(e)
    """)
    import torch
    if torch.__version__ < "2":
        assert "PyTorch 2.0 or later" in out and torch.__version__ in out
    assert "libmodelmem_npu_alloc.so" in out or "torch_npu" in out


@needs_build_tree
def test_package_installs_into_a_prefix(tmp_path):
    from conftest import BUILD
    import subprocess
    import sys
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(tmp_path), "--component",
                        "python"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = tmp_path / "lib" / ver / "dist-packages"
    assert (site / "modelmem" / "__init__.pyi").exists()
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run([sys.executable, "-c",
                        "import modelmem; print(modelmem.__file__); "
                        "print(modelmem.solve([(8, 0, 1)]).arena_bytes)"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    path, arena = r.stdout.split()
    assert path.startswith(str(site)) and arena == "8"


@needs_torch
def test_npu_allocator_hands_torch_npu_the_library_and_its_functions(tmp_path):
    # torch_npu needs Ascend hardware; a stand-in module records what npu_allocator passes to
    # torch_npu.npu.memory.NPUPluggableAllocator, and the library it names must export both.
    pkg = tmp_path / "torch_npu" / "npu"
    pkg.mkdir(parents=True)
    (tmp_path / "torch_npu" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "memory.py").write_text(textwrap.dedent("""
        class NPUPluggableAllocator:
            def __init__(self, path, alloc_fn, free_fn):
                self.args = (path, alloc_fn, free_fn)
    """))
    out = check(f"""
        import ctypes, os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import modelmem, modelmem.torch as mt
        try:
            mt.npu_allocator("device:npu,bogus_key:1")
        except modelmem.ConfigError as e:
            print("config error:", e)
        a = mt.npu_allocator("device:npu,strategy:caching")
        path, alloc_fn, free_fn = a.args
        lib = ctypes.CDLL(path)
        getattr(lib, alloc_fn), getattr(lib, free_fn)
        print(os.path.basename(path), alloc_fn, free_fn, os.environ["MODELMEM_ALLOC_CONF"])
    """)
    assert "config error:" in out and "bogus_key" in out
    assert "libmodelmem_npu_alloc.so modelmem_npu_alloc modelmem_npu_free " \
           "device:npu,strategy:caching" in out


@needs_torch
def test_memory_logger_records_allocations_frees_and_ooms_inside_pools():
    # The configuration's pools (the router's) and a pool made here with a quota: inside each,
    # every allocation, free and refusal is logged with the pool (the configuration's pools
    # logged only their stack's segments, a pool made here no refusal).
    out = check("""
        import torch, modelmem, modelmem.torch as mt
        mt.use_cpu_allocator("strategy:caching,pools:[a:16]")
        with modelmem.MemoryLogger() as log:
            with modelmem.pool("a"):
                x = torch.empty(1 << 20)         # 4 MiB
                try:
                    torch.empty(8 << 20)         # 32 MiB: over a's 16 MiB
                except RuntimeError as e:
                    assert "to change:" in str(e), e
                del x
        got = [(e["event"], e["pool"], e["size"]) for e in log.events()
               if e["event"] in ("alloc", "free", "oom")]
        assert got == [("alloc", "a", 4 << 20), ("oom", "a", 32 << 20), ("free", "a", 4 << 20)], got
        print("ok")
    """)
    assert out.strip() == "ok"
    out = check("""
        import torch, modelmem, modelmem.torch as mt
        mt.use_cpu_allocator("strategy:caching")
        with modelmem.MemoryLogger() as log:
            with modelmem.pool("side", quota=8 << 20):
                x = torch.empty(1 << 20)
                try:
                    torch.empty(2 << 20)         # 8 MiB more: over the quota
                except RuntimeError:
                    pass
                del x
        got = [(e["event"], e["pool"], e["size"]) for e in log.events()
               if e["event"] in ("alloc", "free", "oom")]
        assert got == [("alloc", "side", 4 << 20), ("oom", "side", 8 << 20),
                       ("free", "side", 4 << 20)], got
        print("ok")
    """)
    assert out.strip() == "ok"
