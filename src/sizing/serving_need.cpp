// The need of a served decoder LLM on its strategy (modelmem/sizing/serving_need.hpp): the
// serving loop's allocation sequence (weights, the KV cache, then prefill chunks and decode
// steps) replayed through one pool's stack at the smallest whole-MiB quota that serves it. The
// blocks are the served model's (serve_model): the weight blocks and the steps `plan --serve`
// replays, so that the two cannot drift apart.
#include "modelmem/sizing/serving_need.hpp"

#include <vector>

#include "modelmem/core/checked.hpp"
#include "modelmem/model/kv_cache.hpp"
#include "modelmem/sizing/need.hpp"

namespace modelmem::sizing {
namespace {

// The live bytes at the peak of `step` replayed alone, its requests below `min_request` left out
// as serving_trace leaves them out (at 0: the step's own peak).
std::size_t step_peak(const std::string& model, const ServedStep& step, std::size_t min_request) {
  if (min_request == 0) return step.peak;
  const trace::Trace t = serving_trace(model, {}, {&step}, min_request);
  return trace::peak_live_bytes(t, trace::match_blocks(t));
}

}  // namespace

ServingSequence serving_sequence(const ServedModel& m, const ServingLoad& load,
                                 std::size_t min_request) {
  ServingSequence out;
  std::vector<std::size_t> held = m.weight_blocks;
  for (std::size_t w : m.weight_blocks)
    if (w > 0 && w >= min_request) out.weights = checked_add(out.weights, w, "serving sequence");
  // The KV cache as the loop preallocates it: per KV tensor, every token it holds.
  for (const auto& layer : m.kv.layers) {
    const std::size_t size = layer.kind == model::KvKind::kRecurrent
                                 ? checked_mul(layer.bytes_per_sequence, load.sequences, "KV cache")
                                 : checked_mul(layer.bytes_per_token, load.tokens, "KV cache");
    held.push_back(size);
    if (size > 0 && size >= min_request) out.kv = checked_add(out.kv, size, "serving sequence");
  }
  // Both transitions, twice each, for the caching pool's steady state.
  const std::vector<const ServedStep*> steps = {&m.prefill, &m.prefill, &m.decode, &m.prefill,
                                                &m.decode};
  out.trace = serving_trace(m.model, held, steps, min_request);
  out.steps = steps.size();
  out.decode_peak = step_peak(m.model, m.decode, min_request);
  out.prefill_peak = step_peak(m.model, m.prefill, min_request);
  out.planned = m.planned;
  return out;
}

ServedModel serving_model(const std::string& model, const ServeOptions& options) {
  // The figures the serving plan works from, on a device too large to matter, as a PyTorch
  // serving loop runs its steps (eager lifetimes).
  ServeOptions o = options;
  o.device_memory = std::size_t{1} << 46;
  o.overhead = "0";
  o.runtime = "eager";
  return serve_model(model, o);
}

ServingSequence serving_sequence(const std::string& model, const ServeOptions& options,
                                 const ServingLoad& load, std::size_t min_request) {
  return serving_sequence(serving_model(model, options), load, min_request);
}

ServingNeed serving_need_on_strategy(const ServedModel& m, const ServingLoad& load,
                                     const std::string& strategy, std::size_t min_request) {
  const ServingSequence s = serving_sequence(m, load, min_request);
  NeedOptions no;
  no.strategy = strategy_config(strategy);
  no.min_request = min_request;
  no.inferences = s.steps;
  ServingNeed n;
  n.pool = need_of_sequence(s.trace, no, /*eager_order=*/true);
  n.pool.runtime = "eager";
  n.pool.weights = s.weights;
  n.kv = s.kv;
  n.decode_peak = s.decode_peak;
  n.prefill_peak = s.prefill_peak;
  n.planned = s.planned;
  return n;
}

ServingNeed serving_need_on_strategy(const std::string& model, const ServeOptions& options,
                                     const ServingLoad& load, const std::string& strategy,
                                     std::size_t min_request) {
  return serving_need_on_strategy(serving_model(model, options), load, strategy, min_request);
}

}  // namespace modelmem::sizing
