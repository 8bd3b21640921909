"""Shared fixtures of the Python tests. CTest runs them twice: python_tests against the build tree
(PYTHONPATH=build/python), python_venv_install against a pip installation (MODELMEM_INSTALLED=1:
the package and the `modelmem` entry point of the interpreter running pytest; venv_check.py)."""
import os
import shutil
import subprocess
import sys

import pytest

SOURCE = os.environ.get("MODELMEM_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.environ.get("MODELMEM_SHARED_DATA") or os.path.join(SOURCE, "..", "shared", "data")
if not os.path.isdir(SHARED):  # a worktree one level further down
    SHARED = os.path.join(SOURCE, "..", "..", "shared", "data")
INSTALLED = os.environ.get("MODELMEM_INSTALLED") == "1"
if INSTALLED:
    import modelmem as _installed
    BUILD = None
    PYTHONPATH = os.path.dirname(os.path.dirname(_installed.__file__))  # its site-packages
    CLI = os.path.join(os.path.dirname(sys.executable), "modelmem")  # the console entry point
    if not os.path.exists(CLI):
        CLI = shutil.which("modelmem") or CLI
else:
    BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
    CLI = os.path.join(BUILD, "modelmem")
    PYTHONPATH = os.path.join(BUILD, "python")

needs_build_tree = pytest.mark.skipif(INSTALLED, reason="tests the CMake build tree's install; "
                                      "this run is against a pip installation")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="no torch in the interpreter (scripts/setup "
                                 "--runtimes makes the project environment): "
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
