"""modelmem: memory planning and allocation for deep-learning deployment, from Python.

Plan a model ahead of time with its need on the strategy that serves it (plan), find the largest
batch or sequence that fits a device (fit), share a device among models (plan_device), size the
KV cache of a decoder LLM served by an engine (plan_serving), solve a planning problem (solve),
read and analyse traces and PyTorch memory snapshots (Trace), check a configuration string
(config), run PyTorch on modelmem's CPU allocator (modelmem.torch.use_cpu_allocator), give
several models their own pools with quotas (pool), log allocations with their Python callers
(MemoryLogger) and see every process's pools (info). The package wraps the C++ library: the
same code as the `modelmem` CLI. See docs/python.md.
"""

__version__ = "0.1.0"  # the CMake project's version (tests/python/test_install.py checks)

from ._native import library_path
from ._errors import (ConfigError, CudaAllocatorUnavailable, Error, InvalidInputError,
                      NpuAllocatorUnavailable, OutOfMemoryError, QuotaExceededError,
                      UnsupportedError)
from ._torch_check import check_before_load as _check_before_load

_check_before_load()  # the extension links libtorch: a different torch here must not meet it
from . import _modelmem  # noqa: E402
from ._modelmem import (Advice, AllocationSite, Analysis, BucketPlan, DevicePlan, Fit, FitEach,
                        MemoryLogger, Placement, Plan, PlannedTensor, Pool, StepStats, Trace,
                        TraceRecording, config, config_keys, config_report, fit, info,
                        info_report, place, plan, plan_device, pool, solve, solver_names)
from ._serving import ServingPlan, plan_serving  # noqa: E402

__all__ = [
    "Advice", "AllocationSite", "Analysis", "BucketPlan", "ConfigError",
    "CudaAllocatorUnavailable", "DevicePlan", "Error", "Fit", "FitEach", "InvalidInputError",
    "MemoryLogger", "NpuAllocatorUnavailable", "OutOfMemoryError", "Placement", "Plan",
    "PlannedTensor", "Pool", "QuotaExceededError", "ServingPlan", "StepStats", "Trace",
    "TraceRecording",
    "UnsupportedError", "config", "config_keys", "config_report", "fit", "info", "info_report",
    "library_path", "place", "plan", "plan_device", "plan_serving", "pool", "solve",
    "solver_names", "torch",
]


def __getattr__(name):
    # modelmem.torch is imported on first use: it imports torch, which takes a while.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'modelmem' has no attribute {name!r}")
