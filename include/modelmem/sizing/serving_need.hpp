// The need of a served decoder LLM on the strategy that serves it: the serving process's
// allocation sequence replayed through one pool's stack (sizing::serves), at the smallest
// whole-MiB quota that serves it (one MiB less does not), plus one segment for PyTorch eager's
// order as fit's need adds (need.hpp: order_slack). The sequence is what a serving loop
// allocates (tests/sizing/serve_child.py runs one under the pool):
//   - every weight tensor, one block each, held;
//   - the KV cache, one block per KV tensor of the model (per layer its keys and its values, as
//     an engine preallocates them), each holding `tokens` tokens (`sequences` recurrent states),
//     held;
//   - then steps, each framed by step marks: prefill chunk, prefill chunk, decode step, prefill
//     chunk, decode step (both transitions, twice each for the caching pool's steady state).
//     The weight blocks and the steps are the served model's (serve_model), the very blocks
//     `plan --serve` replays: a checkpoint's routed experts merged as the engine loads them; a
//     step's blocks its activation buffers under PyTorch eager lifetimes, its inputs included
//     (made for the step, freed after it), planned from the ONNX step graph with the KV cache
//     kept out; a checkpoint folder without an ONNX export has no graph: its step is the
//     formula's activation bytes as the blocks that formula counts (two hidden-state tensors,
//     the MLP or attention intermediate, the logits), an estimate.
// Value types; each call owns its data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "modelmem/sizing/need.hpp"
#include "modelmem/sizing/serving.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::sizing {

struct ServingLoad {
  std::size_t tokens = 0;     ///< KV tokens held per layer (sequences x context in blocks)
  std::size_t sequences = 0;  ///< sequences (a recurrent layer's states)
};

struct ServingSequence {
  trace::Trace trace;
  std::size_t weights = 0;  ///< bytes of the weight blocks
  std::size_t kv = 0;       ///< bytes of the KV blocks
  /// Live bytes at a decode (prefill) step's peak: its blocks of min_request bytes or more.
  std::size_t decode_peak = 0;
  std::size_t prefill_peak = 0;
  std::size_t steps = 0;  ///< steps in the sequence
  bool planned = false;   ///< steps planned from an ONNX graph (false: the checkpoint formula)
};

/// The allocation sequence of serving the served model `m` (serve_model: its weight blocks and
/// steps, those `plan --serve` replays) holding `load`; requests below `min_request` bytes are
/// left out (the LD_PRELOAD library sends them to the C library).
ServingSequence serving_sequence(const ServedModel& m, const ServingLoad& load,
                                 std::size_t min_request = 0);

/// serve_model(model, options) as a PyTorch serving loop runs it (eager lifetimes; the device
/// size and overhead play no part). Throws InvalidInput as plan_serving.
ServedModel serving_model(const std::string& model, const ServeOptions& options);

/// serving_sequence(serving_model(model, options), load, min_request).
ServingSequence serving_sequence(const std::string& model, const ServeOptions& options,
                                 const ServingLoad& load, std::size_t min_request = 0);

struct ServingNeed {
  /// The replay of the serving sequence through the pool's stack (need_of_sequence): its
  /// strategy, weights, peak_live, replay_mib, order_slack (one more segment for PyTorch eager's
  /// order: the serving loop of the test decoder, run under the pool, was refused at
  /// replay_mib), need_mib and need (the quota), peak_reserved, min_request, requests, replays,
  /// and inferences (the steps in the sequence). runtime is "eager"; ideal, eager and the
  /// overhead are not set (a served model's figures are the serving plan's).
  PoolNeed pool;
  std::size_t kv = 0;  ///< bytes of the KV blocks held
  std::size_t decode_peak = 0, prefill_peak = 0;
  bool planned = false;  ///< steps planned from an ONNX graph (false: the checkpoint formula)
};

/// The need of serving the served model `m` with `load` on `strategy` (strategy_config() text).
ServingNeed serving_need_on_strategy(const ServedModel& m, const ServingLoad& load,
                                     const std::string& strategy, std::size_t min_request = 0);

/// The same for serving_model(model, options).
ServingNeed serving_need_on_strategy(const std::string& model, const ServeOptions& options,
                                     const ServingLoad& load, const std::string& strategy,
                                     std::size_t min_request = 0);

}  // namespace modelmem::sizing
