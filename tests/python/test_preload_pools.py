"""modelmem.pool(name) under `modelmem run`: it selects the LD_PRELOAD library's pool
(modelmem_pool_push), so a Python program's memory goes to the pool it names, up to its quota."""
import subprocess
import sys
import textwrap

import pytest

from conftest import CLI, PYTHONPATH

CHILD = textwrap.dedent("""
    import ctypes, modelmem
    MiB = 1 << 20
    current = ctypes.CDLL(None).modelmem_pool_current   # the preload's own view
    current.restype = ctypes.c_char_p
    assert current() == b"", current()
    with modelmem.pool("a"):
        assert current() == b"a", current()
        x = bytearray(8 * MiB)                 # served in pool a
        with modelmem.pool("b"):               # nested
            assert current() == b"b", current()
            try:
                bytearray(40 * MiB)            # past b's 32 MiB
                raise SystemExit("pool b served 40 MiB past its quota")
            except MemoryError:
                pass
            y = bytearray(4 * MiB)
        assert current() == b"a", current()
    assert current() == b"", current()
    try:
        with modelmem.pool("c"):
            pass
        raise SystemExit("entered a pool the configuration does not list")
    except modelmem.InvalidInputError as e:
        assert "(a, b)" in str(e), e
    print("ok")
    """)


def run_under_preload(conf, code):
    env = {"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin", "MODELMEM_MONITOR": "0"}
    return subprocess.run([CLI, "run", "--conf", conf, "--", sys.executable, "-c", code],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def preload_works():
    r = run_under_preload("strategy:caching", "print('up')")
    if r.returncode != 0 or r.stdout.strip() != "up":
        pytest.skip(f"`modelmem run` does not start python here: {r.stderr.strip()[:200]}")


def test_pool_selects_the_preloads_pool_under_modelmem_run(preload_works):
    r = run_under_preload("strategy:caching,pools:[a:64,b:32]", CHILD)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    # The refusal names the pool and the quota that would serve the request.
    assert "pool 'b' would exceed its quota" in r.stderr, r.stderr
    assert "to change: a quota of at least" in r.stderr and "pools:[b:" in r.stderr, r.stderr


def test_pool_without_pools_in_the_preloads_string_says_what_it_needs(preload_works):
    r = run_under_preload("strategy:caching", textwrap.dedent("""
        import modelmem
        try:
            with modelmem.pool("a"):
                pass
        except modelmem.UnsupportedError as e:
            assert "modelmem run" in str(e) and "pools:[...]" in str(e), e
            print("refused")
        """))
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr
