// The need of a served decoder LLM on its strategy (modelmem/sizing/serving_need.hpp): the
// serving loop's allocation sequence (weights, the KV cache, then prefill chunks and decode
// steps) replayed through one pool's stack at the smallest whole-MiB quota that serves it.
#include "modelmem/sizing/serving_need.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

#include "modelmem/core/checked.hpp"
#include "modelmem/model/checkpoint.hpp"
#include "modelmem/model/gguf.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/kv_cache.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/sizing/need.hpp"
#include "sizing/serving_steps.hpp"

namespace modelmem::sizing {
namespace {

// One step's blocks in the order a runtime takes and gives them back: (size, start, end); at a
// step, frees before allocations.
struct ServedStep {
  std::vector<std::tuple<std::size_t, plan::Time, plan::Time>> buffers;
  std::size_t peak = 0;  ///< live bytes at its peak
};

// The step of an ONNX decoder with its KV cache out of the arena, as plan --serve plans it
// (serving_steps.hpp; `o.runtime` is "eager": PyTorch eager lifetimes).
ServedStep onnx_step(const std::string& path, const model::DecoderSignature& sig,
                     const std::map<std::string, std::int64_t>& dims, const ServeOptions& o) {
  const plan::Problem problem =
      model::build_lifetimes(step_graph(path, sig, dims), step_lifetimes(o)).problem;
  ServedStep s;
  for (const auto& b : problem.buffers)
    if (b.size > 0) s.buffers.emplace_back(b.size, b.start, b.end);
  return s;
}

// A checkpoint's step without a graph: the formula's bytes (plan_serving's activation figure for
// that step) as the blocks it counts, all live at once.
ServedStep formula_step(const model::ModelConfig& c, std::size_t elem, std::int64_t tokens,
                        std::int64_t logit_rows, std::size_t total) {
  const std::size_t hidden = checked_mul(static_cast<std::size_t>(tokens),
                                         static_cast<std::size_t>(c.hidden) * elem, "activations");
  const std::size_t logits = checked_mul(static_cast<std::size_t>(logit_rows) * 4,
                                         static_cast<std::size_t>(c.vocab), "logits");
  ServedStep s;
  const std::size_t fixed = 2 * hidden + logits;
  for (std::size_t size : {hidden, hidden, total > fixed ? total - fixed : 0, logits})
    if (size > 0) s.buffers.emplace_back(size, 0, 1);
  return s;
}

void finish_step(ServedStep& s, std::size_t min_request) {
  std::vector<std::pair<plan::Time, long long>> events;
  for (const auto& [size, start, end] : s.buffers) {
    if (size < min_request) continue;
    events.emplace_back(start, static_cast<long long>(size));
    events.emplace_back(end, -static_cast<long long>(size));
  }
  std::sort(events.begin(), events.end());
  long long live = 0, peak = 0;
  for (const auto& [t, d] : events) peak = std::max(peak, live += d);
  s.peak = static_cast<std::size_t>(peak);
}

}  // namespace

ServingSequence serving_sequence(const std::string& model, const ServeOptions& options,
                                 const ServingLoad& load, std::size_t min_request) {
  // The figures the serving plan works from (context, chunk, decode batch, the KV layers): on a
  // device too large to matter.
  ServeOptions o = options;
  o.device_memory = std::size_t{1} << 46;
  o.overhead = "0";
  o.runtime = "eager";
  const ServePlan p = plan_serving(model, o);

  ServingSequence out;
  std::vector<std::size_t> weights;
  ServedStep decode, prefill;
  const std::string& onnx = p.source == "onnx" ? model : options.onnx;
  if (p.source == "checkpoint") {
    const model::Checkpoint ck = model::read_checkpoint_or_gguf(model);
    const std::size_t elem = o.dtype.empty() ? 0 : model::dtype_size(o.dtype, "--dtype");
    // One rank's share of each tensor, as Checkpoint::weights_per_rank counts it.
    weights = ck.tensor_bytes_per_rank(o.tp, elem);
    if (onnx.empty()) {
      const std::string stored = ck.config.torch_dtype.empty() ? "bf16" : ck.config.torch_dtype;
      const std::size_t act = model::dtype_size(o.dtype.empty() ? stored : o.dtype, "--dtype");
      decode =
          formula_step(ck.config, act, p.decode_batch, p.decode_batch, p.decode_activation_bytes);
      prefill = formula_step(ck.config, act, p.prefill_tokens, 1, p.prefill_activation_bytes);
    }
  }
  if (!onnx.empty()) {
    const model::DecoderSignature sig = model::read_decoder_signature(onnx, o.kv_pairs);
    if (p.source == "onnx") {
      model::LoadOptions one;
      one.dims = model::step_dims(sig, 1, 1, 1);
      const model::Graph g = model::load_onnx(onnx, one);
      for (const auto& t : g.tensors)
        if (t.kind == model::TensorKind::kWeight)
          weights.push_back(model::activation_bytes(t, step_lifetimes(o).weight_float_bytes));
    }
    decode = onnx_step(
        onnx, sig,
        model::step_dims(sig, p.decode_batch, 1, std::max<std::int64_t>(p.context - 1, 0)), o);
    prefill = onnx_step(
        onnx, sig, model::step_dims(sig, 1, p.prefill_tokens, p.context - p.prefill_tokens), o);
    out.planned = true;
  }
  finish_step(decode, min_request);
  finish_step(prefill, min_request);
  out.decode_peak = decode.peak;
  out.prefill_peak = prefill.peak;

  using alloc::EventKind;
  trace::Trace& t = out.trace;
  t.name = model;
  std::uintptr_t address = 4096;
  auto push = [&](EventKind kind, std::uintptr_t at, std::size_t size, const char* label) {
    trace::TraceEvent e;
    e.kind = kind;
    e.time_ns = t.events.size();
    e.address = at;
    e.size = size;
    if (label) e.label = label;
    t.events.push_back(std::move(e));
  };
  auto hold = [&](std::size_t size, std::size_t& sum) {
    if (size == 0 || size < min_request) return;
    push(EventKind::kAlloc, address, size, nullptr);
    address += 64;
    sum = checked_add(sum, size, "serving sequence");
  };
  for (std::size_t w : weights) hold(w, out.weights);
  // The KV cache as the loop preallocates it: per KV tensor, every token it holds.
  for (const auto& layer : p.kv.layers) {
    const std::size_t size = layer.kind == model::KvKind::kRecurrent
                                 ? checked_mul(layer.bytes_per_sequence, load.sequences, "KV cache")
                                 : checked_mul(layer.bytes_per_token, load.tokens, "KV cache");
    hold(size, out.kv);
  }
  auto run = [&](const ServedStep& s) {
    std::vector<std::tuple<plan::Time, int, std::size_t>> order;
    for (std::size_t i = 0; i < s.buffers.size(); ++i) {
      if (std::get<0>(s.buffers[i]) < min_request) continue;
      order.emplace_back(std::get<1>(s.buffers[i]), 1, i);
      order.emplace_back(std::get<2>(s.buffers[i]), 0, i);
    }
    std::sort(order.begin(), order.end());
    push(EventKind::kMark, 0, 0, "step_begin");
    const std::uintptr_t base = address;
    for (const auto& [step, alloc, i] : order)
      push(alloc ? EventKind::kAlloc : EventKind::kFree, base + 64 * i, std::get<0>(s.buffers[i]),
           nullptr);
    address = base + 64 * (s.buffers.size() + 1);
    push(EventKind::kMark, 0, 0, "step_end");
    ++out.steps;
  };
  for (const ServedStep* s : {&prefill, &prefill, &decode, &prefill, &decode}) run(*s);
  return out;
}

ServingNeed serving_need_on_strategy(const std::string& model, const ServeOptions& options,
                                     const ServingLoad& load, const std::string& strategy,
                                     std::size_t min_request) {
  const ServingSequence s = serving_sequence(model, options, load, min_request);
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

}  // namespace modelmem::sizing
