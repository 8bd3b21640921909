"""modelmem for PyTorch: modelmem as PyTorch's CPU allocator in the running process
(use_cpu_allocator), and the CUDA / NPU pluggable allocators where PyTorch can take them.

Debian's python3-torch 1.13 shares the system libtorch with the extension, so c10's
SetCPUAllocator reaches every CPU tensor made after the switch; tensors made before it keep their
own deleter and are freed correctly.
"""

import os

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - exercised where python3-torch is missing
    raise ImportError("modelmem.torch needs PyTorch (Debian: apt-get install python3-torch)") from _e

from . import _build_info, _modelmem, _torch_check
from ._errors import CudaAllocatorUnavailable, NpuAllocatorUnavailable, UnsupportedError
from ._native import LIBRARIES, find_library

# The torch just imported must be the one the extension was built against (version, C++ ABI).
_torch_check.check_loaded(_torch)

__all__ = ["use_cpu_allocator", "CpuAllocator", "cuda_allocator", "npu_allocator"]


def _version_tuple(v):
    parts = []
    for p in v.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


class _Step:
    """One step for the planned arena: ``with handle.step(): model(x)``."""

    def __enter__(self):
        _modelmem._begin_step()
        return self

    def __exit__(self, *exc):
        _modelmem._end_step()
        return False


class CpuAllocator:
    """The handle use_cpu_allocator() returns: modelmem is PyTorch's CPU allocator."""

    def __init__(self, config):
        self.config = config

    def step(self):
        """A context manager marking one step (one inference): the planned arena learns the
        step's allocations and then serves them from one planned arena, with no OS calls. Steps
        go to the current thread's pool when one is active (modelmem.pool)."""
        return _Step()

    def stats(self):
        """Statistics with torch.cuda.memory_stats()'s key names: 'allocated_bytes.all.current',
        'reserved_bytes.all.peak', 'num_alloc_retries', 'num_device_alloc', ..."""
        return _modelmem._stats("")

    def report(self):
        """A human-readable report: strategy, allocated / reserved bytes, OS calls, pools."""
        return _modelmem._report()

    def describe(self):
        """The allocator's one-line description (strategy and effective settings)."""
        return _modelmem._describe()

    def trace(self, path):
        """Starts recording every allocator event; returns a TraceRecording (a context manager).
        Its stop() (or leaving the with block) writes the trace CSV to `path` and returns the
        modelmem.Trace."""
        return _modelmem._trace(os.fspath(path))

    def __repr__(self):
        return f"<modelmem.torch.CpuAllocator config={self.config!r}>"


def use_cpu_allocator(config="strategy:planned"):
    """Installs modelmem as PyTorch's CPU allocator in this process and returns its handle.

    config: a modelmem configuration string (see modelmem.config). Raises ConfigError for a bad
    string, UnsupportedError when modelmem is already installed with another config (one
    allocator per process: its tensors may still be alive). Calling it again with the same
    config returns a handle to the same allocator."""
    if not isinstance(config, str):
        raise _modelmem_error("InvalidInputError", "config must be a str such as 'strategy:planned'")
    if not _modelmem._have_torch:
        raise UnsupportedError(
            f"modelmem.torch.use_cpu_allocator is not available: this modelmem has no libtorch "
            f"integration ({_build_info.without_torch or 'built without libtorch'}). Reinstall "
            f"it where torch "
            f"and its CMake package are present: pip install --no-build-isolation "
            f"--force-reinstall --no-deps <modelmem source folder>")
    _modelmem._install_cpu_allocator(config)
    return CpuAllocator(config)


def _modelmem_error(cls, message):
    from . import _errors
    return getattr(_errors, cls)(message)


def cuda_allocator(config="strategy:caching"):
    """A torch.cuda.memory.CUDAPluggableAllocator over libmodelmem_cuda_alloc.so, configured by
    `config` (MODELMEM_ALLOC_CONF). Pass it to torch.cuda.memory.change_current_allocator before
    the first CUDA allocation. Raises CudaAllocatorUnavailable (an UnsupportedError) naming what
    is missing: PyTorch 2.0 or later (Debian 12 ships 1.13), CUDA, or the library."""
    version = _version_tuple(_torch.__version__)
    if version < (2, 0) or not hasattr(_torch.cuda, "memory") or not hasattr(
            _torch.cuda.memory, "CUDAPluggableAllocator"):
        raise CudaAllocatorUnavailable(
            f"modelmem.torch.cuda_allocator needs PyTorch 2.0 or later "
            f"(torch.cuda.memory.CUDAPluggableAllocator); this is PyTorch {_torch.__version__}")
    if not _torch.cuda.is_available():
        raise CudaAllocatorUnavailable(
            "modelmem.torch.cuda_allocator: no CUDA device (torch.cuda.is_available() is False)")
    lib = find_library(*LIBRARIES["cuda"])
    if lib is None:
        raise CudaAllocatorUnavailable(
            "modelmem.torch.cuda_allocator: libmodelmem_cuda_alloc.so not found (build modelmem "
            "with the CUDA toolkit, or set MODELMEM_CUDA_ALLOC_LIB to its path)")
    _modelmem.config(config)  # ConfigError before anything is set
    os.environ["MODELMEM_ALLOC_CONF"] = config
    return _torch.cuda.memory.CUDAPluggableAllocator(lib, "modelmem_alloc", "modelmem_free")


def npu_allocator(config="strategy:caching"):
    """A torch_npu.npu.memory.NPUPluggableAllocator over libmodelmem_npu_alloc.so, configured by
    `config` (MODELMEM_ALLOC_CONF; e.g. "device:npu,strategy:caching,expandable_segments:True").
    Pass it to torch_npu.npu.memory.change_current_allocator before the first NPU allocation.
    Raises NpuAllocatorUnavailable (an UnsupportedError) naming what is missing: the library, or
    torch_npu with its pluggable allocator. ConfigError for a bad string, before anything is set."""
    lib = find_library(*LIBRARIES["npu"])
    if lib is None:
        raise NpuAllocatorUnavailable(
            "modelmem.torch.npu_allocator: libmodelmem_npu_alloc.so not found (built from "
            "integrations/npu/ by the normal build; or set MODELMEM_NPU_ALLOC_LIB to its path)")
    try:
        from torch_npu.npu.memory import NPUPluggableAllocator
    except ImportError:
        raise NpuAllocatorUnavailable(
            "modelmem.torch.npu_allocator needs torch_npu with NPUPluggableAllocator (Ascend's "
            "PyTorch adapter, torch_npu.npu.memory); it is not installed here") from None
    _modelmem.config(config)  # ConfigError before anything is set
    os.environ["MODELMEM_ALLOC_CONF"] = config
    return NPUPluggableAllocator(lib, "modelmem_npu_alloc", "modelmem_npu_free")

