// What one replica of a model needs on a kind of device (modelmem/sizing/placement.hpp): the
// need on the strategy that serves it as `modelmem plan --device-memory` computes it
// (sizing::need_of), or a decoder LLM's serving plan (sizing::plan_serving) for the KV cache it
// is asked to hold; plus the memory outside the allocator, once per container.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/engines.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "modelmem/sizing/serving.hpp"
#include "modelmem/sizing/serving_need.hpp"

namespace modelmem::sizing {
namespace {

std::size_t whole_mib(std::size_t bytes) {
  return checked_add(bytes, kMiB - 1, "request") / kMiB * kMiB;
}

const std::string& strategy_of(const ModelSpec& m, const PlaceOptions& o) {
  return m.strategy.empty() ? o.strategy : m.strategy;
}
const std::string& overhead_of(const ModelSpec& m, const PlaceOptions& o) {
  return m.overhead.empty() ? o.overhead : m.overhead;
}

// A fraction of the device ("5%", "0.05") cannot be one figure for devices of several sizes.
bool is_device_fraction(const std::string& text) {
  return !text.empty() && (text.back() == '%' || text.find('.') != std::string::npos) &&
         std::none_of(text.begin(), text.end(),
                      [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
}

void finish(PlacementNeed& n) {
  n.request = whole_mib(checked_add(n.need, n.overhead.bytes, "request"));
}

// The engines' flags as environment variables the serving image reads (docs/fleet.md).
std::map<std::string, std::string> engine_env(const ServePlan& p, Backend backend) {
  std::map<std::string, std::string> env;
  for (const auto& e : p.engines) {
    const EngineInfo& row = find_engine(e.engine);
    if (row.cuda_only && backend != Backend::kCuda) continue;
    env[fmt::format("MODELMEM_{}_ARGS", row.env_name)] = e.command;
  }
  return env;
}

PlacementNeed serving_need(const ModelSpec& m, Backend backend, const PlaceOptions& options) {
  const ServeSpec& s = *m.serve;
  PlacementNeed n;
  n.backend = backend;
  n.strategy = strategy_config(strategy_of(m, options));
  n.overhead = parse_overhead(overhead_of(m, options), backend);
  ServeOptions o;
  o.context = s.context;
  o.block_size = s.block_size;
  o.max_batched_tokens = s.max_batched_tokens;
  if (s.concurrency > 0) o.max_num_seqs = s.concurrency;
  o.dtype = s.dtype;
  o.kv_dtype = s.kv_dtype;
  o.tp = s.tp;
  o.onnx = s.onnx;
  o.overhead = std::to_string(n.overhead.bytes);
  o.strategy = strategy_of(m, options);
  o.backend = backend;
  // First the per-token and per-sequence figures (on a device too large to matter), then the
  // plan on a device of the request: the need of the weights and the steps on the strategy + the
  // KV cache asked for + overhead, in whole MiB. Its pool holds at least that cache (the rounding
  // adds whole blocks), and its engine settings are what `plan --serve --device-memory REQUEST`
  // prints.
  // The model is modelled once (serve_model, as a PyTorch serving loop runs it: eager
  // lifetimes); the probe, the plan and the serving need all take that one value.
  o.device_memory = std::size_t{1} << 46;
  const ServedModel served = serving_model(m.path, o);
  const ServePlan probe = plan_serving(served, o);
  const std::size_t asked =
      s.concurrency > 0
          ? checked_mul(static_cast<std::size_t>(s.concurrency), probe.sequence_bytes, "KV cache")
          : checked_mul((static_cast<std::size_t>(s.kv_tokens) +
                         static_cast<std::size_t>(s.block_size) - 1) /
                            static_cast<std::size_t>(s.block_size),
                        probe.kv_block_bytes, "KV cache");
  const std::size_t non_kv = probe.need.need;  // weights + activations on the strategy
  o.device_memory =
      whole_mib(checked_add(checked_add(non_kv, asked, "need"), n.overhead.bytes, "device memory"));
  const ServePlan p = plan_serving(served, o);
  if (p.kv_cache_bytes < asked)
    throw Error(fmt::format("{}: the serving plan's KV cache {} is less than the {} asked for",
                            m.name, p.kv_cache_bytes, asked));
  // The quota: the serving loop's allocation sequence holding that cache, replayed through the
  // pool's strategy (serving_need.hpp), at the smallest whole MiB that serves it.
  ServingLoad load;
  load.tokens = p.kv_tokens;
  load.sequences = s.concurrency > 0 ? static_cast<std::size_t>(s.concurrency) : p.max_sequences;
  const ServingNeed sn =
      serving_need_on_strategy(served, load, n.strategy, min_request_of(backend, n.strategy));
  n.weights = p.weights_bytes;
  n.need = sn.pool.need;
  finish(n);
  n.basis = fmt::format(
      "serving need on {}: weights {} + KV {} for {} ({} tokens in {} blocks, {:.2f} sequences "
      "of {} tokens) held, then prefill chunks of {} tokens and decode steps of {} ({}{}) "
      "replayed through the pool, {} MiB does not serve it{}; serving plan {}: `plan "
      "--serve --device-memory {}MiB --context {} --max-num-seqs {} --max-batched-tokens {}{}` "
      "prints it",
      n.strategy, format_bytes(sn.pool.weights), format_bytes(sn.kv),
      s.concurrency > 0 ? fmt::format("{} sequences of {} tokens", s.concurrency, p.context)
                        : fmt::format("{} tokens", s.kv_tokens),
      p.kv_tokens, p.kv_blocks, p.max_concurrency, p.context, p.prefill_tokens, p.decode_batch,
      sn.planned ? "activations planned from the ONNX step graphs, eager lifetimes"
                 : "activations by the config formula, an estimate",
      sn.pool.min_request
          ? fmt::format(", requests of {} and more", format_bytes(sn.pool.min_request))
          : "",
      sn.pool.replay_mib - 1,
      sn.pool.order_slack
          ? fmt::format(", + {} for PyTorch's order", format_bytes(sn.pool.order_slack))
          : "",
      format_bytes(checked_add(non_kv, p.kv_cache_bytes, "need")), o.device_memory / kMiB,
      p.context, o.max_num_seqs, o.max_batched_tokens,
      n.overhead.bytes ? fmt::format(" --overhead {}B", n.overhead.bytes) : " --overhead 0");
  n.engine_env = engine_env(p, backend);
  return n;
}

}  // namespace

model::PlanOptions plan_options(const ModelSpec& m) {
  model::PlanOptions o;
  o.dims = m.dims;
  o.dtype = m.dtype;
  o.runtime = m.runtime;
  o.ignore_unknown_dims = m.shared_dims;
  return o;
}

void validate_sizing(const std::vector<ModelSpec>& models, const PlaceOptions& options) {
  auto check = [](const std::string& strategy, const std::string& overhead,
                  const std::string& who) {
    try {
      strategy_config(strategy);
      if (is_device_fraction(overhead))
        throw InvalidInput(fmt::format(
            "--overhead '{}': a fraction of the device is not one figure on devices of several "
            "sizes; give a size (512MiB)",
            overhead));
      parse_overhead(overhead, Backend::kCuda);
    } catch (const InvalidInput& e) {
      if (who.empty()) throw;
      std::string what = e.what();
      for (const char* flag : {"--strategy", "--overhead"})
        if (what.rfind(flag, 0) == 0) what = std::string(flag + 2) + what.substr(std::strlen(flag));
      throw InvalidInput(fmt::format("model {}: {}", who, what));
    }
  };
  check(options.strategy, options.overhead, "");
  for (const auto& m : models) check(m.strategy, m.overhead, m.name);
}

PlacementNeed model_need(const ModelSpec& m, const model::ModelPlan& plan, Backend backend,
                         const PlaceOptions& options) {
  SizingOptions so;
  so.strategy = strategy_of(m, options);
  so.overhead = overhead_of(m, options);
  so.backend = backend;
  const PoolNeed pn = need_of(plan, so);
  PlacementNeed n;
  n.backend = backend;
  n.weights = pn.weights;
  n.need = pn.need;
  n.strategy = pn.strategy;
  n.overhead = pn.overhead;
  finish(n);
  for (const auto& [name, value] : plan.graph.dims) n.dims_bound.push_back(name);
  n.basis = fmt::format(
      "need on {}: weights {} and {} {} inferences ({}{}) replayed through the pool, {} MiB "
      "does not serve it{}",
      pn.strategy, format_bytes(pn.weights), pn.inferences, pn.runtime, m.dtype,
      pn.min_request ? fmt::format(", requests of {} and more", format_bytes(pn.min_request)) : "",
      pn.replay_mib - 1,
      pn.order_slack ? fmt::format(", + {} for PyTorch's order", format_bytes(pn.order_slack))
                     : "");
  return n;
}

PlacementNeed model_need(const ModelSpec& m, Backend backend, const PlaceOptions& options) {
  validate_sizing({m}, options);
  if (m.serve) {
    try {
      return serving_need(m, backend, options);
    } catch (const InvalidInput& e) {
      // plan_serving names its own flags (--kv-dtype, --context): say whose serve: it was.
      throw InvalidInput(fmt::format("model {}: serve: {}", m.name, e.what()));
    }
  }
  return model_need(m, model::plan_model(m.path, plan_options(m)), backend, options);
}

}  // namespace modelmem::sizing
