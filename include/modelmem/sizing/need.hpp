// The need of a model on the allocator that will serve it: the bytes a strategy really reserves
// for one model, found by running the model's allocation sequence through that strategy's own
// code, built by the config factory exactly as `modelmem run` builds a per-model pool
// (`STRATEGY,pools:[m:Q],default_pool:m`), on a simulated device that hands out addresses but no
// memory. The need is the smallest whole-MiB quota Q under which the sequence is served with no
// out-of-memory; one MiB less fails. Beside it: the ideal and eager figures the plan derives,
// the memory outside the allocator (the overhead, stated with its source) and the total.
//
// The allocation sequence is that of the runtime the model was planned for
// (model::PlanOptions::runtime): every weight first (one block each, held throughout), then
// `inferences` inferences, each framed by step marks, each buffer of the plan's lifetimes
// allocated at its first step and freed at its end (frees of a step before its allocations).
// Value types; each call owns its data; thread-safe as long as the ModelPlan is not modified.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "modelmem/model/plan_model.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::sizing {

/// The kind of device a plan is for: what the memory outside the allocator defaults to.
enum class Backend { kCuda, kNpu, kHost };
std::string backend_name(Backend kind);          ///< "cuda", "npu", "host"
Backend parse_backend(const std::string& text);  ///< throws InvalidInput

/// Memory on the device outside the allocator: the runtime's context, library handles and their
/// workspaces. Never silently zero: `source` says where the figure comes from.
struct Overhead {
  std::size_t bytes = 0;
  std::string source;
};

/// The default for a device kind, with its source (docs/plan.md, "The memory outside the
/// allocator"): cuda 1 GiB (the CUDA context PyTorch users report at 700-800 MiB, plus cuBLAS
/// workspaces), npu 1 GiB (no measurement: the CUDA figure), host 0 (the interpreter and the
/// libraries are outside a device:limited budget and the pools).
Overhead default_overhead(Backend kind);

/// `--overhead TEXT`: a size ("512MiB", "1GiB", bytes) or a fraction of the device's memory
/// ("0.05", "5%"; needs `device_memory`). Empty text: default_overhead(kind). Throws
/// InvalidInput naming `--overhead`.
Overhead parse_overhead(const std::string& text, Backend kind, std::size_t device_memory = 0);

/// `--strategy TEXT` as the configuration string of one pool's stack: a strategy name
/// ("caching", "static", "planned", "expandable" = caching with expandable segments) or a
/// configuration string ("strategy:caching,roundup_power2_divisions:4"). Empty: what
/// `modelmem run` builds without a configuration ("strategy:caching"). The pools and device keys
/// are refused: the need is for one pool, and the pool's view of the device is built for it.
/// Throws InvalidInput naming `--strategy`.
std::string strategy_config(const std::string& text);

struct NeedOptions {
  std::string strategy;         ///< strategy_config() text; "" = what `modelmem run` uses
  std::size_t inferences = 3;   ///< inferences replayed (steady state: warm-up, plan, served)
  bool weights_in_pool = true;  ///< the weights come from the same pool as the activations
  /// Requests below this many bytes never reach the pool: the LD_PRELOAD library leaves them to
  /// the C library (preload_threshold_kb, 64 KiB by default; sizing for PyTorch on the host).
  /// 0: every request does (a device's allocator: CUDA, NPU).
  std::size_t min_request = 0;
  Overhead overhead = default_overhead(Backend::kCuda);
};

struct PoolNeed {
  std::string strategy;  ///< the configuration of the pool's stack (strategy_config)
  std::string runtime;   ///< "static" or "eager": whose allocation sequence was replayed
  std::size_t weights = 0;
  std::size_t ideal = 0;      ///< weights + ideal arena (a static executor, perfect packing)
  std::size_t eager = 0;      ///< weights + eager peak (the live bytes PyTorch eager holds)
  std::size_t peak_live = 0;  ///< requested bytes live at the peak of the replayed sequence
  /// The smallest whole-MiB quota under which the strategy serves the sequence with no
  /// out-of-memory (one MiB less does not).
  std::size_t replay_mib = 0;
  /// Under the eager runtime on a segmenting pool (caching, expandable, planned's fallback): two
  /// segments (40 MiB when the sequence has requests above 1 MiB, else 4 MiB), or half the
  /// largest request the sequence frees where that is more. PyTorch's eager order is not the
  /// plan's around a step (outputs the export folded away, a convolution's copies made one by
  /// one, a view's base freed an op later), and where a caching pool splits its blocks follows
  /// that order: PyTorch itself needed from 74 MiB less to 44 MiB (0.35 times the largest
  /// request) more than the replay on the models measured (docs/plan.md; docs/benchmarks.md,
  /// need-order).
  std::size_t order_slack = 0;
  /// What the pool needs: replay_mib MiB + order_slack (need_mib MiB), the figure every quota,
  /// total and fit verdict uses.
  std::size_t need = 0;
  std::size_t need_mib = 0;
  std::size_t peak_reserved = 0;  ///< what the pool reserved at that quota
  std::size_t inferences = 0;     ///< inferences in the replayed sequence
  std::size_t min_request = 0;    ///< requests below it left out (NeedOptions::min_request)
  std::size_t requests = 0;       ///< allocations in the replayed sequence
  std::size_t replays = 0;        ///< probes run to find the need
  Overhead overhead;
  std::size_t total = 0;  ///< need + overhead
};

/// The allocation sequence of `plan` (see the file comment), as a trace.
trace::Trace allocation_sequence(const model::ModelPlan& plan, std::size_t inferences = 3,
                                 bool weights = true, std::size_t min_request = 0);

/// Whether `config` (a pool's stack, strategy_config()) serves `sequence` in a pool of
/// `quota_mib` MiB with no out-of-memory; `peak_reserved` receives what the pool reserved.
bool serves(const trace::Trace& sequence, const std::string& config, std::size_t quota_mib,
            std::size_t* peak_reserved = nullptr);

/// The need of an allocation sequence given as a trace (weights first, then inferences framed by
/// step marks, as allocation_sequence() makes them) on `options.strategy`: the search
/// need_on_strategy() runs. `eager_order` adds PoolNeed::order_slack on a segmenting pool.
/// Fills every field but runtime, weights, ideal and eager (the caller's model knows them).
PoolNeed need_of_sequence(const trace::Trace& sequence, const NeedOptions& options,
                          bool eager_order);

/// The need of `plan` on `options.strategy`. Throws InvalidInput for a bad strategy, Error when
/// no quota up to 2^44 MiB serves the sequence.
PoolNeed need_on_strategy(const model::ModelPlan& plan, const NeedOptions& options = {});

}  // namespace modelmem::sizing
