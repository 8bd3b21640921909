from os import PathLike
from typing import (Any, ContextManager, Dict, Iterator, List, Literal, Mapping, Optional, Sequence,
                    Tuple, Union, overload)

from ._errors import (ConfigError as ConfigError, CudaAllocatorUnavailable as CudaAllocatorUnavailable,
                      Error as Error, InvalidInputError as InvalidInputError,
                      NpuAllocatorUnavailable as NpuAllocatorUnavailable,
                      OutOfMemoryError as OutOfMemoryError, QuotaExceededError as QuotaExceededError,
                      UnsupportedError as UnsupportedError)
from . import torch as torch

__version__: str
_Path = Union[str, PathLike]

class PlannedTensor:
    name: str
    size: int
    offset: int
    first: int
    last: int

class BucketPlan:
    value: int
    arena_bytes: int
    lower_bound: int
    weights_bytes: int

class Plan:
    source: str
    solver: str
    arena_bytes: int
    weights_bytes: int
    lower_bound: int
    lower_bound_bytes: int
    proven_optimal: bool
    seconds: float
    note: str
    tensors: List[PlannedTensor]
    offsets: List[int]
    buckets: List[BucketPlan]
    peak_step: Optional[int]
    # A model's figures (None for a plan from solve()), named as `modelmem plan --json` names them.
    model: Optional[str]
    dims: Optional[Dict[str, int]]
    runtime: Optional[str]
    dtype: Optional[str]
    total_bytes: Optional[int]
    ideal_arena_bytes: Optional[int]
    eager_peak_bytes: Optional[int]
    strategy: Optional[str]
    need_bytes: Optional[int]
    need_runtime: Optional[str]
    need_replay_bytes: Optional[int]
    order_slack_bytes: Optional[int]
    peak_live_bytes: Optional[int]
    peak_reserved_bytes: Optional[int]
    overhead_bytes: Optional[int]
    overhead_source: Optional[str]
    need_total_bytes: Optional[int]
    quota_bytes: Optional[int]
    @overload
    def to_json(self, path: None = None) -> str: ...
    @overload
    def to_json(self, path: _Path) -> None: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def report(self, show_live: int = 8) -> str: ...
    def to_html(self, path: _Path) -> None: ...

_Dims = Optional[Union[Mapping[str, int], Sequence[str]]]
_Size = Union[int, str]

def plan(path: _Path, dims: _Dims = None, dtype: Optional[str] = None, order: str = "stored",
         buckets: Optional[Union[str, Mapping[str, Sequence[int]]]] = None, solver: str = "best",
         time_limit: float = 10, runtime: str = "static", strategy: Optional[str] = None,
         overhead: Optional[Union[str, int, float]] = None, device_kind: str = "cuda",
         keep_weights_dtype: bool = False, alignment: int = 64, safety: Optional[float] = None,
         lengths: Optional[_Path] = None, ignore_model_limits: bool = False) -> Plan: ...

class DevicePlan:
    device_memory_bytes: int
    runtime: str
    strategy: str
    fits: bool
    headroom_bytes: int
    total_ideal_bytes: int
    total_eager_bytes: int
    total_quota_bytes: int
    overhead_bytes: int
    overhead_source: str
    total_bytes: int
    models: List[Dict[str, Any]]
    configs: List[str]
    config: str
    def report(self) -> str: ...
    @overload
    def to_json(self, path: None = None) -> str: ...
    @overload
    def to_json(self, path: _Path) -> None: ...

def plan_device(paths: Union[_Path, Sequence[_Path]], device_memory: _Size, dims: _Dims = None,
                dtype: Optional[str] = None, runtime: str = "eager",
                strategy: Optional[str] = None, overhead: Optional[Union[str, int, float]] = None,
                device_kind: str = "cuda", keep_weights_dtype: bool = False,
                safety: Optional[float] = None, order: str = "stored", solver: str = "best",
                time_limit: float = 10, ignore_model_limits: bool = False) -> DevicePlan: ...

class Fit:
    dim: str
    model: Optional[str]
    value: int
    found: bool
    need_bytes: int
    next_need_bytes: int
    limit: str
    probes: int
    seconds: float
    device: Optional[DevicePlan]
    def report(self) -> str: ...
    @overload
    def to_json(self, path: None = None) -> str: ...
    @overload
    def to_json(self, path: _Path) -> None: ...

class FitEach:
    results: List[Fit]
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Fit: ...
    def __iter__(self) -> Iterator[Fit]: ...
    def report(self) -> str: ...
    @overload
    def to_json(self, path: None = None) -> str: ...
    @overload
    def to_json(self, path: _Path) -> None: ...

@overload
def fit(paths: Union[_Path, Sequence[_Path]], dim: str, device_memory: _Size, dims: _Dims = None,
        dtype: Optional[str] = None, runtime: str = "eager", strategy: Optional[str] = None,
        overhead: Optional[Union[str, int, float]] = None, device_kind: str = "cuda",
        each: Literal[False] = False, keep_weights_dtype: bool = False,
        safety: Optional[float] = None, order: str = "stored", solver: str = "best",
        time_limit: float = 10, max_value: int = 16777216) -> Fit: ...
@overload
def fit(paths: Union[_Path, Sequence[_Path]], dim: str, device_memory: _Size, dims: _Dims = None,
        dtype: Optional[str] = None, runtime: str = "eager", strategy: Optional[str] = None,
        overhead: Optional[Union[str, int, float]] = None, device_kind: str = "cuda", *,
        each: Literal[True], keep_weights_dtype: bool = False, safety: Optional[float] = None,
        order: str = "stored", solver: str = "best", time_limit: float = 10,
        max_value: int = 16777216) -> FitEach: ...
def solve(problem: Union[_Path, Sequence[Tuple[int, int, int]]], solver: str = "best",
          capacity: Optional[int] = None, time_limit: float = 10) -> Plan: ...
def solver_names() -> List[str]: ...
class ServingPlan(Dict[str, Any]):
    """The fields of `modelmem serve --json`, as attributes and keys."""
    model: str
    source: str
    device_memory_bytes: int
    tp: int
    context: int
    block_size: int
    weights_bytes: int
    activation_bytes: int
    activation_peak_bytes: int
    decode_activation_bytes: int
    decode_batch: int
    prefill_activation_bytes: int
    prefill_tokens: int
    activation_source: str
    strategy: str
    need_bytes: int
    need_replay_bytes: int
    order_slack_bytes: int
    peak_reserved_bytes: int
    overhead_bytes: int
    overhead_source: str
    kv_bytes_per_token: int
    kv_element_bytes: int
    kv_layers: Dict[str, Any]
    kv_block_bytes: int
    kv_cache_bytes: int
    kv_blocks: int
    kv_tokens: int
    sequence_bytes: int
    max_concurrency: float
    max_sequences: int
    max_context: int
    max_context_capped: bool
    engines: Dict[str, Dict[str, str]]
    engine_formulas: Dict[str, Any]

def plan_serving(model: _Path, device_memory: Union[int, str], context: int = 0,
                 block_size: int = 16, max_batched_tokens: int = 8192, max_num_seqs: int = 256,
                 dtype: Optional[str] = None, kv_dtype: Optional[str] = None, tp: int = 1,
                 overhead: Union[int, str, None] = None, lengths: Optional[_Path] = None,
                 mean_context: Optional[float] = None, kv: Sequence[str] = (),
                 onnx: Optional[_Path] = None, runtime: str = "eager",
                 strategy: Optional[str] = None, device_kind: str = "cuda",
                 kv_window: Sequence[str] = (), engine: Optional[str] = None,
                 ignore_model_limits: bool = False) -> ServingPlan: ...

class Placement:
    fits: bool
    method: str
    replicas: List[Dict[str, Any]]
    devices: List[Dict[str, Any]]
    messages: List[str]

    def report(self) -> str: ...
    def emit(self, target: str, pods: bool = False, namespace: str = "", dra_driver: str = "",
             dra_capacity: str = "memory", ray_app: str = "app:build") -> str: ...
    def cap(self, replica: int, target: str) -> Dict[str, Any]: ...

def place(models: Union[str, Sequence[str]], devices: str, dims: Mapping[str, int] = ...,
          dtype: str = "fp32", runtime: Optional[str] = None, replicas: int = 1, exact_limit: int = 12,
          templates: bool = True, spread: bool = True, strategy: Optional[str] = None,
          overhead: Optional[str] = None) -> Placement: ...

class Advice:
    topic: str
    message: str
    config: str  # a complete config string modelmem.config accepts; "" when none
    mindspore: str  # MindSpore tracker files: the static pool as mindspore.runtime.set_memory(...)

class StepStats:
    begin: int
    end: int
    allocs: int
    bytes_allocated: int
    peak_live: int
    live_in: int
    group: int
    common_size: int

class AllocationSite:
    site: str
    allocs: int
    bytes: int
    live_at_end: int

class Analysis:
    advice: List[Advice]
    steps: List[StepStats]
    summary: Dict[str, Any]
    sites: List[AllocationSite]
    skipped: List[str]
    def to_dict(self) -> Dict[str, Any]: ...

class Trace:
    name: str
    warnings: List[str]
    dropped: int
    @staticmethod
    def load(path: _Path, skip_bad: bool = False) -> Trace: ...
    def __len__(self) -> int: ...
    def analyze(self, solver: str = "", time_limit: float = 2.0) -> Analysis: ...
    def replay(self, config: str = "", repeat: int = 1, touch: bool = True) -> Dict[str, Any]: ...
    def to_perfetto(self, path: _Path) -> None: ...
    def to_html(self, path: _Path, max_blocks: int = 200000) -> None: ...
    def save(self, path: _Path) -> None: ...

class TraceRecording:
    active: bool
    def stop(self) -> Trace: ...
    def __enter__(self) -> TraceRecording: ...
    def __exit__(self, *exc: Any) -> bool: ...

class Pool:
    name: str
    quota: Optional[int]
    used: int
    peak_used: int
    def stats(self) -> Dict[str, int]: ...
    def __enter__(self) -> Pool: ...
    def __exit__(self, *exc: Any) -> bool: ...

def pool(name: str, quota: Optional[int] = None) -> Pool: ...

class MemoryLogger:
    active: bool
    stacks: bool
    devices: List[str]
    def __init__(self, stacks: bool = True) -> None: ...
    def __enter__(self) -> MemoryLogger: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def __len__(self) -> int: ...
    def events(self) -> List[Dict[str, Any]]: ...
    def trace(self, device: Optional[str] = None) -> Trace: ...
    def save(self, path: _Path, device: Optional[str] = None) -> None: ...
    def analyze(self, solver: str = "", time_limit: float = 2.0,
                device: Optional[str] = None) -> Analysis: ...

def config(config: str) -> Dict[str, str]: ...
def config_keys() -> List[Dict[str, str]]: ...
def config_report(config: str) -> str: ...
def info() -> List[Dict[str, Any]]: ...
def info_report(format: str = "table", devices: bool = True,
                pid: Optional[int] = None) -> str: ...
def library_path(kind: str) -> str: ...
