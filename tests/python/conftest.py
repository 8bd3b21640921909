"""Shared fixtures of the Python tests (run by CTest: python_tests, with PYTHONPATH=build/python)."""
import os
import subprocess
import sys

import pytest

SOURCE = os.environ.get("MODELMEM_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
SHARED = os.environ.get("MODELMEM_SHARED_DATA") or os.path.join(SOURCE, "..", "shared", "data")
if not os.path.isdir(SHARED):  # a worktree one level further down
    SHARED = os.path.join(SOURCE, "..", "..", "shared", "data")
CLI = os.path.join(BUILD, "modelmem")
PYTHONPATH = os.path.join(BUILD, "python")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="python3-torch is not installed: "
                                 "the PyTorch parts of modelmem are not tested")


def shared_trace(name):
    path = os.path.join(SHARED, "traces", name)
    if not os.path.exists(path):
        pytest.skip(f"shared trace {path} not present")
    return path


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory):
    """The snapshots tests/trace/make_snapshots.py writes in PyTorch's documented layout."""
    out = tmp_path_factory.mktemp("snapshots")
    subprocess.run([sys.executable, os.path.join(SOURCE, "tests", "trace", "make_snapshots.py"),
                    str(out)], check=True)
    return out


def run_python(code, *, env=None, timeout=300, cwd=None):
    """Runs `code` in a fresh python3 (modelmem's CPU allocator is one per process)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHONPATH
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


def run_cli(*args, timeout=300):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)
