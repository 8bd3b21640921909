"""modelmem's exceptions. Every error of the library arrives as one of these, carrying the C++
message; each is also a standard Python exception, so ``except ValueError`` works."""


class Error(Exception):
    """Base class of every modelmem error."""


class InvalidInputError(Error, ValueError):
    """Bad input: a malformed file, argument, size or name."""


class ConfigError(InvalidInputError):
    """A configuration string with an unknown key or a bad value; the message names the key."""


class OutOfMemoryError(Error, MemoryError):
    """An allocation, or a plan within a capacity, could not be satisfied."""


class QuotaExceededError(OutOfMemoryError):
    """A per-model pool's quota would be exceeded; the message names the pool and the quota."""


class UnsupportedError(Error, NotImplementedError):
    """Not available here: a PyTorch too old, no CUDA, no NPU library, built without libtorch."""


class NpuAllocatorUnavailable(UnsupportedError):
    """modelmem.torch.npu_allocator: the NPU library or torch_npu is missing."""


class CudaAllocatorUnavailable(UnsupportedError):
    """modelmem.torch.cuda_allocator: PyTorch older than 2.0, no CUDA, or no CUDA library."""
