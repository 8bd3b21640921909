"""The package's own files and checks: its native files found relative to it, the `modelmem` entry
point (python -m modelmem), the version, and the torch check at import (a torch other than the
one the extension was built against is an ImportError naming both versions, never a crash).
Run against the build tree (python_tests) and against a pip installation (python_venv_install)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

import modelmem
from modelmem import _build_info
from conftest import CLI, INSTALLED, PYTHONPATH, SOURCE, needs_torch

PKG = os.path.dirname(modelmem.__file__)


def test_version_is_the_cmake_projects():
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        version = re.search(r"project\(modelmem VERSION ([0-9.]+)", f.read()).group(1)
    assert modelmem.__version__ == version


def test_native_files_are_found_in_the_package():
    for kind, name in (("preload", "libmodelmem_preload.so"), ("npu", "libmodelmem_npu_alloc.so")):
        path = modelmem.library_path(kind)
        assert path == os.path.join(PKG, "lib", name)
        assert os.path.isfile(path)
    if not os.path.exists(os.path.join(PKG, "lib", "libmodelmem_cuda_alloc.so")):
        with pytest.raises(modelmem.UnsupportedError, match="libmodelmem_cuda_alloc.so"):
            modelmem.library_path("cuda")
    with pytest.raises(ValueError, match="preload, cuda, npu"):
        modelmem.library_path("rocm")
    if INSTALLED:  # copies in the package, nothing pointing elsewhere
        assert not PKG.startswith(os.path.join(SOURCE, "python") + os.sep)
        assert os.path.basename(os.path.dirname(PKG)) in ("site-packages", "dist-packages"), PKG
        for sub in ("lib", "bin"):
            for n in os.listdir(os.path.join(PKG, sub)):
                assert not os.path.islink(os.path.join(PKG, sub, n)), n


def test_npu_library_exports_the_c_abi_through_ctypes():
    import ctypes
    lib = ctypes.CDLL(modelmem.library_path("npu"))
    for fn in ("modelmem_npu_alloc", "modelmem_npu_free", "modelmem_ms_alloc", "modelmem_ms_free"):
        assert hasattr(lib, fn), fn


def test_python_m_modelmem_is_the_command_line_tool():
    small = os.path.join(SOURCE, "examples", "small.csv")
    via_module = subprocess.run([sys.executable, "-m", "modelmem", "solve", small],
                                capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert via_module.returncode == 0, via_module.stderr
    tool = subprocess.run([os.path.join(PKG, "bin", "modelmem"), "solve", small],
                          capture_output=True, text=True, timeout=120)
    strip = lambda s: re.sub(r"\d+\.\d{3}", "T", s)  # noqa: E731 (solve times differ)
    assert strip(via_module.stdout) == strip(tool.stdout) and "lower bound" in tool.stdout
    # The tool's exit status and errors come through unchanged.
    bad = subprocess.run([sys.executable, "-m", "modelmem", "solve", "/nonexistent.csv"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert bad.returncode != 0 and "nonexistent.csv" in bad.stderr
    if INSTALLED:
        r = subprocess.run([CLI, "--version"], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == f"modelmem {modelmem.__version__}"


def test_modelmem_run_finds_the_preload_library_beside_the_tool():
    r = subprocess.run([sys.executable, "-m", "modelmem", "run", "--report", "--", "true"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stderr


def _fake_torch(tmp_path, version, abi):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "version.py").write_text(f"__version__ = {version!r}\n")
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""
        from .version import __version__
        class _C:
            _GLIBCXX_USE_CXX11_ABI = {abi!r}
    """))
    return str(tmp_path)


def _import_with(path, code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, PYTHONPATH]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)


@needs_torch
@pytest.mark.skipif(_build_info.torch_version is None, reason="built without libtorch")
def test_another_torch_version_is_an_import_error_naming_both(tmp_path):
    r = _import_with(_fake_torch(tmp_path, "9.9.9", True), "import modelmem")
    assert r.returncode == 1, (r.returncode, r.stderr)  # an exception, not a signal
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "9.9.9" in last, last
    assert f"built against PyTorch {_build_info.torch_version}" in last, last
    assert "pip install --no-build-isolation" in last


@needs_torch
@pytest.mark.skipif(_build_info.torch_cxx11_abi is None, reason="built without libtorch")
def test_another_cxx_abi_is_an_import_error(tmp_path):
    other = not _build_info.torch_cxx11_abi
    r = _import_with(_fake_torch(tmp_path, _build_info.torch_version, other),
                     "import torch, modelmem")
    assert r.returncode == 1, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "ABI" in last, last


@needs_torch
@pytest.mark.skipif(not INSTALLED and _build_info.without_torch is not None,
                    reason="this build tree was configured without libtorch")
def test_the_torch_here_is_the_one_built_against():
    import torch
    import modelmem.torch  # noqa: F401 (the check at import passes)
    assert _build_info.torch_version == str(torch.__version__)
    assert _build_info.torch_cxx11_abi == bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert _build_info.without_torch is None


@needs_torch
def test_plan_and_cpu_allocator_from_outside_the_source_tree(tmp_path):
    # What a user does after installing: from another folder, a plan, PyTorch on the CPU
    # allocator, and the command-line tool on the same model.
    model = os.path.join(SOURCE, "models", "tiny.onnx")
    code = textwrap.dedent(f"""
        import torch, modelmem, modelmem.torch as mt
        p = modelmem.plan({model!r}, dims={{"n": 2}})
        h = mt.use_cpu_allocator("strategy:caching")
        x = torch.ones(1 << 18)
        assert h.stats()["allocated_bytes.all.current"] >= x.numel() * 4
        print(modelmem.__file__, p.arena_bytes)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert r.returncode == 0, r.stderr
    path, arena = r.stdout.split()
    assert path == modelmem.__file__
    cli = subprocess.run([sys.executable, "-m", "modelmem", "plan", model, "--dim", "n=2"],
                         capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path),
                         env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    assert cli.returncode == 0, cli.stderr
    assert f"planned arena  {int(arena):,} B" in cli.stdout, (arena, cli.stdout)
