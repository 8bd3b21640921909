// plan_serving() (modelmem/sizing/serving.hpp): the figures of `modelmem plan --serve`. The
// steps come from the model's own plans (an ONNX export, its KV tensors kept out of the arena) or
// the config's formula; the weights and the steps are run through the strategy that serves them
// (need_of_sequence), and that need is what the KV cache is left beside. The engines' settings
// are derived from the same figures, so passing them makes each engine allocate this pool.
#include "modelmem/sizing/serving.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <regex>

#include "modelmem/core/error.hpp"
#include "modelmem/model/buckets.hpp"
#include "modelmem/model/checkpoint.hpp"
#include "modelmem/model/gguf.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/solve.hpp"
#include "modelmem/plan/problem.hpp"
#include "modelmem/sizing/engines.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "sizing/serving_steps.hpp"

namespace modelmem::sizing {

void validate(const ServeOptions& o) {
  if (o.device_memory == 0) throw InvalidInput("--device-memory: give the device's size (64GiB)");
  if (o.context < 0) throw InvalidInput(fmt::format("--context {}: must be positive", o.context));
  if (o.block_size <= 0)
    throw InvalidInput(
        fmt::format("--block-size {}: must be a positive number of tokens", o.block_size));
  if (o.max_batched_tokens <= 0)
    throw InvalidInput(
        fmt::format("--max-batched-tokens {}: must be positive", o.max_batched_tokens));
  if (o.max_num_seqs <= 0)
    throw InvalidInput(fmt::format("--max-num-seqs {}: must be positive", o.max_num_seqs));
  if (o.tp <= 0) throw InvalidInput(fmt::format("--tp {}: must be a positive number", o.tp));
  if (!o.dtype.empty() && o.dtype != "fp32" && o.dtype != "fp16" && o.dtype != "bf16")
    throw InvalidInput(fmt::format("--dtype {}: expected fp32, fp16 or bf16", o.dtype));
  if (!o.kv_dtype.empty()) model::dtype_size(o.kv_dtype, "--kv-dtype");
  if (o.runtime != "eager" && o.runtime != "static")
    throw InvalidInput(fmt::format("--runtime {}: expected static or eager", o.runtime));
  if (o.mean_context && !(*o.mean_context >= 1 && std::isfinite(*o.mean_context)))
    throw InvalidInput(fmt::format("--mean-context {}: must be at least 1", *o.mean_context));
  if (o.mean_context && !o.lengths_path.empty())
    throw InvalidInput("--lengths and --mean-context both give the request lengths: give one");
  SizingOptions sizing;
  sizing.strategy = o.strategy;
  sizing.overhead = o.overhead;
  sizing.backend = o.backend;
  validate(sizing, o.device_memory);
  if (!o.engine.empty()) find_engine(o.engine);
  if (!(o.engine_fraction > 0 && o.engine_fraction <= 1))
    throw InvalidInput(fmt::format("--engine-fraction {}: must be in (0, 1]", o.engine_fraction));
}

namespace {

// What the output says of the formula: its error, measured (docs/serving.md, "Activations of a
// checkpoint"; tests/sizing/serving_test.cpp checks it stays within this).
constexpr const char* kFormulaNote =
    "a formula: against PyTorch eager steps of GPT-2-style decoders of 2 to 6 layers "
    "(bench/serving/formula.py) it gave -8 % to +21 % of the decode step and -29 % to -25 % of "
    "the prefill chunk (they hold attention scores and every token's logits), a need on the "
    "strategy 2 MiB under the planned steps'; give --onnx to plan the steps";

constexpr std::size_t kRounds = 3;  // prefill + decode rounds replayed, as plan's 3 inferences

using Step = ServedStep;

struct StepPlans {
  Step decode, prefill;
  std::size_t weights = 0;
  std::vector<std::size_t> weight_blocks;  ///< each weight tensor, as the pool gets them
  model::KvCache kv;
  std::string window_source;  ///< where the sliding windows come from ("" without)
};

// One step of the decoder with its KV cache out of the arena: the eager peak of live activation
// bytes (PyTorch eager lifetimes: no in-place reuse, inputs held, module arguments held) or the
// arena planned for a static executor with in-place reuse, as `modelmem plan` computes them.
Step plan_step(const std::string& path, const model::DecoderSignature& sig,
               const std::map<std::string, std::int64_t>& dims, const ServeOptions& o) {
  model::ModelPlan mp;
  mp.graph = step_graph(path, sig, dims);
  const model::LifetimeOptions lt = step_lifetimes(o);
  mp.weight_float_bytes = lt.weight_float_bytes;
  Step s;
  if (o.runtime == "eager") {
    mp.options.runtime = model::Runtime::kEager;
    mp.plan.lifetimes = model::build_lifetimes(mp.graph, lt);
    s.peak = plan::lower_bound(mp.plan.lifetimes.problem);
  } else {
    mp.options.runtime = model::Runtime::kStatic;
    plan::SolveOptions so;
    so.time_limit = std::chrono::duration<double>(10);
    mp.plan = model::solve_model(mp.graph, lt, "best", so);
    s.peak = mp.plan.solve.plan->arena_size;
  }
  s.inference = allocation_sequence(mp, 1, /*weights=*/false);
  return s;
}

// Plans the decode step and the prefill chunk of an ONNX decoder with its KV cache outside.
StepPlans plan_onnx_steps(const std::string& path, const ServeOptions& o, std::int64_t context,
                          std::int64_t batch, std::int64_t chunk) {
  model::DecoderSignature sig = model::read_decoder_signature(path, o.kv_pairs);
  model::apply_kv_windows(sig, o.kv_windows);
  model::find_kv_windows(path, sig, {std::int64_t{1} << 16, context - 1});
  StepPlans s;
  // A cache whose every layer keeps at most `window` tokens is fed at most that many.
  std::int64_t window = 0;
  for (const auto& p : sig.pairs) {
    if (p.window <= 0) {
      window = 0;
      break;
    }
    window = window ? std::min(window, p.window) : p.window;
  }
  auto cached = [&](std::int64_t past) { return window ? std::min(past, window) : past; };
  // One token of one sequence: the KV bytes per token, and the weights.
  model::LoadOptions load;
  load.dims = model::step_dims(sig, 1, 1, 1);
  model::Graph one = model::load_onnx(path, load);
  std::size_t kv_element = 0;
  if (!o.kv_dtype.empty())
    kv_element = model::dtype_size(o.kv_dtype, "--kv-dtype");
  else if (!o.dtype.empty())
    kv_element = model::dtype_size(o.dtype, "--dtype");
  s.kv = model::kv_cache_of(one, sig, kv_element);
  const model::LifetimeOptions lt = step_lifetimes(o);
  s.weights = model::build_lifetimes(one, lt).weights_bytes;
  for (const auto& t : one.tensors)
    if (t.kind == model::TensorKind::kWeight)
      if (std::size_t b = model::activation_bytes(t, lt.weight_float_bytes))
        s.weight_blocks.push_back(b);
  for (const auto& p : sig.pairs)
    if (p.window > 0 && s.window_source.empty()) s.window_source = p.window_source;
  s.decode =
      plan_step(path, sig,
                model::step_dims(sig, batch, 1, cached(std::max<std::int64_t>(context - 1, 0))), o);
  s.prefill = plan_step(path, sig, model::step_dims(sig, 1, chunk, cached(context - chunk)), o);
  return s;
}

// The documented estimate for a checkpoint without an ONNX export (docs/serving.md): the live
// tensors of one layer's step in an engine with fused attention, plus the logits. As a step of
// those tensors (the residual stream, the normed input, the larger of the MLP's and the
// attention's intermediates, the float32 logits), all live at once.
Step formula_step(const model::ModelConfig& c, std::size_t elem, int tp, std::int64_t tokens,
                  std::int64_t logit_rows) {
  const std::size_t n = static_cast<std::size_t>(tokens);
  const std::size_t h = static_cast<std::size_t>(c.hidden);
  const std::size_t inter = static_cast<std::size_t>((c.intermediate + tp - 1) / tp);
  const std::size_t q = static_cast<std::size_t>((c.heads + tp - 1) / tp);
  const std::size_t kvh = static_cast<std::size_t>(std::max<std::int64_t>(1, c.kv_heads / tp));
  const std::size_t hd = static_cast<std::size_t>(c.head_dim);
  const std::size_t mlp = 3 * inter;
  const std::size_t attn = (q + 2 * kvh) * hd + q * hd;
  const std::size_t stream = checked_mul(checked_mul(n, h, "activations"), elem, "activations");
  const std::vector<std::size_t> parts = {
      stream, stream,
      checked_mul(checked_mul(n, std::max(mlp, attn), "activations"), elem, "activations"),
      checked_mul(static_cast<std::size_t>(logit_rows) * 4, static_cast<std::size_t>(c.vocab),
                  "logits")};
  Step s;
  auto push = [&](alloc::EventKind kind, std::uintptr_t at, std::size_t size, const char* label) {
    trace::TraceEvent e;
    e.kind = kind;
    e.time_ns = s.inference.events.size();
    e.address = at;
    e.size = size;
    if (label) e.label = label;
    s.inference.events.push_back(std::move(e));
  };
  push(alloc::EventKind::kMark, 0, 0, "step_begin");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == 0) continue;
    push(alloc::EventKind::kAlloc, 4096 + 64 * i, parts[i], nullptr);
    s.peak = checked_add(s.peak, parts[i], "activations");
  }
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (parts[i]) push(alloc::EventKind::kFree, 4096 + 64 * i, parts[i], nullptr);
  push(alloc::EventKind::kMark, 0, 0, "step_end");
  return s;
}

// A checkpoint's tensors as an engine's pool gets them: one block per tensor, one rank's share,
// except that the routed experts of a mixture of experts are loaded into one tensor per layer
// and projection (vLLM's and SGLang's FusedMoE), so their tensors of one layer and projection
// ("layers.3.mlp.experts.17.up_proj.weight") are one block.
std::vector<std::size_t> engine_weight_blocks(const model::Checkpoint& ck, int tp,
                                              std::size_t float_bytes) {
  const std::vector<std::size_t> bytes = ck.tensor_bytes_per_rank(tp, float_bytes);
  static const std::regex expert(R"(\.experts\.\d+\.)");
  std::vector<std::size_t> blocks;
  std::map<std::string, std::size_t> fused;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::string& name = ck.tensors[i].name;
    const std::string merged = std::regex_replace(name, expert, ".experts.*.");
    if (merged == name) {
      blocks.push_back(bytes[i]);
    } else {
      auto [it, fresh] = fused.emplace(merged, blocks.size());
      if (fresh)
        blocks.push_back(bytes[i]);
      else
        blocks[it->second] = checked_add(blocks[it->second], bytes[i], "weights bytes");
    }
  }
  return blocks;
}

std::int64_t longest_context(const model::KvCache& kv, std::size_t pool, std::int64_t block,
                             std::int64_t cap, bool& capped) {
  std::int64_t lo = 0, hi = cap;
  if (kv.sequence_bytes(hi, block) <= pool) {
    capped = true;
    return hi;
  }
  capped = false;
  while (lo + 1 < hi) {
    std::int64_t mid = lo + (hi - lo) / 2;
    (kv.sequence_bytes(mid, block) <= pool ? lo : hi) = mid;
  }
  return lo;
}

// The rows of an ONNX decoder's position tables, the fewest of them: the longest sequence it
// takes. A position table is a learned embedding gathered at positions the graph computes
// (model::table_limits) or at a graph input of positions (GPT-2's position_ids).
void onnx_positions(const std::string& path, const ServeOptions& o, ServedModel& p) {
  const model::DecoderSignature sig = model::read_decoder_signature(path, o.kv_pairs);
  model::LoadOptions load;
  load.dims = model::step_dims(sig, 1, 1, 1);
  const model::Graph g = model::load_onnx(path, load);
  auto table = [&](const std::string& name, std::size_t rows) {
    if (p.model_max_positions == 0 || static_cast<std::int64_t>(rows) < p.model_max_positions) {
      p.model_max_positions = static_cast<std::int64_t>(rows);
      p.model_positions_source = fmt::format("position table '{}' ({} rows)", name, rows);
    }
  };
  for (const auto& limit : model::table_limits(g)) table(limit.table, limit.rows);
  for (const auto& node : g.nodes) {
    if (node.op_type != "Gather" || !node.domain.empty() || node.inputs.size() < 2 ||
        node.inputs[0] < 0 || node.inputs[1] < 0)
      continue;
    const model::Tensor& weights = g.tensors[node.inputs[0]];
    const model::Tensor& indices = g.tensors[node.inputs[1]];
    if (weights.kind == model::TensorKind::kWeight && weights.shape.size() == 2 &&
        weights.shape[0] > 0 && indices.kind == model::TensorKind::kInput &&
        indices.name.find("position") != std::string::npos)
      table(weights.name, static_cast<std::size_t>(weights.shape[0]));
  }
}

// A context past the model's positions is refused, as vLLM refuses such a --max-model-len.
void check_positions(const ServedModel& p, const ServeOptions& o) {
  if (p.model_max_positions > 0 && p.context > p.model_max_positions && !o.ignore_model_limits)
    throw InvalidInput(fmt::format(
        "{}: --context {} is longer than the model's {} positions ({}); engines refuse a longer "
        "max-model-len (--ignore-model-limits plans it anyway)",
        p.model, p.context, p.model_max_positions, p.model_positions_source));
}

}  // namespace

trace::Trace serving_trace(const std::string& name, const std::vector<std::size_t>& held,
                           const std::vector<const ServedStep*>& steps, std::size_t min_request) {
  trace::Trace t;
  t.name = name;
  std::uint64_t time = 0;
  auto push = [&](trace::TraceEvent e) {
    e.time_ns = time++;
    t.events.push_back(std::move(e));
  };
  std::uintptr_t address = 4096;
  for (std::size_t size : held) {
    if (size == 0 || size < min_request) continue;
    trace::TraceEvent e;
    e.kind = alloc::EventKind::kAlloc;
    e.address = address;
    e.size = size;
    push(e);
    address += 64;
  }
  std::uintptr_t copy = 0;
  for (const ServedStep* step : steps) {
    const std::uintptr_t offset = (++copy) << 40;  // each step's addresses its own
    std::map<std::uintptr_t, std::size_t> live;
    trace::TraceEvent end;
    for (trace::TraceEvent e : step->inference.events) {
      if (e.kind == alloc::EventKind::kMark) {
        if (e.label == "step_end") {
          end = e;
          continue;
        }
      } else {
        e.address += offset;
        if (e.kind == alloc::EventKind::kAlloc) {
          if (e.size < min_request) continue;
          live[e.address] = e.size;
        } else if (live.erase(e.address) == 0) {
          continue;  // a request left out
        }
      }
      push(e);
    }
    for (const auto& [at, size] : live) {
      trace::TraceEvent e;
      e.kind = alloc::EventKind::kFree;
      e.address = at;
      e.size = size;
      push(e);
    }
    end.kind = alloc::EventKind::kMark;
    end.label = "step_end";
    push(end);
  }
  return t;
}

model::Graph step_graph(const std::string& path, const model::DecoderSignature& sig,
                        const std::map<std::string, std::int64_t>& dims) {
  model::LoadOptions load;
  load.dims = dims;
  model::Graph g = model::load_onnx(path, load);
  model::mark_kv_cache(g, sig);
  return g;
}

model::LifetimeOptions step_lifetimes(const ServeOptions& o) {
  model::LifetimeOptions lt;
  lt.float_bytes = o.dtype == "fp16" || o.dtype == "bf16" ? 2 : 4;
  lt.weight_float_bytes = lt.float_bytes;
  if (o.runtime == "eager") {
    lt.in_place = false;
    lt.inputs_live_throughout = true;
    lt.conv_workspace = true;
    lt.module_scopes = true;
  }
  return lt;
}

ServedModel serve_model(const std::string& model, const ServeOptions& o) {
  validate(o);
  ServedModel m;
  m.model = model;
  StepPlans s;
  if (model::is_checkpoint_folder(model) || model::is_gguf_path(model)) {
    m.source = "checkpoint";
    model::Checkpoint ck = model::read_checkpoint_or_gguf(model);
    const auto& c = ck.config;
    m.model_max_positions = c.max_positions;
    m.model_positions_source = c.max_positions_source;
    m.context = o.context ? o.context : (c.max_positions ? c.max_positions : 8192);
    check_positions(m, o);
    std::string stored = c.torch_dtype.empty() ? "bf16" : c.torch_dtype;
    std::size_t elem = model::dtype_size(o.dtype.empty() ? stored : o.dtype, "--dtype");
    std::size_t kv_elem = o.kv_dtype.empty() ? elem : model::dtype_size(o.kv_dtype, "--kv-dtype");
    m.kv = model::kv_cache_of(c, kv_elem, o.tp);
    m.weights_bytes = ck.weights_per_rank(o.tp, o.dtype.empty() ? 0 : elem);
    m.decode_batch = o.max_num_seqs;
    m.prefill_tokens = std::min(o.max_batched_tokens, m.context);
    if (!o.onnx.empty()) {
      s = plan_onnx_steps(o.onnx, o, m.context, m.decode_batch, m.prefill_tokens);
      m.activation_source =
          fmt::format("the larger, planned from {} ({} lifetimes)", o.onnx, o.runtime);
      m.planned = true;
    } else {
      s.decode = formula_step(c, elem, o.tp, m.decode_batch, m.decode_batch);
      s.prefill = formula_step(c, elem, o.tp, m.prefill_tokens, 1);
      m.activation_source = "the larger, a formula from the config (docs/serving.md), not planned";
      m.formula_note = kFormulaNote;
    }
    // The pool holds the checkpoint's tensors as the engine loads them.
    m.weight_blocks = engine_weight_blocks(ck, o.tp, o.dtype.empty() ? 0 : elem);
  } else {
    m.source = "onnx";
    onnx_positions(model, o, m);
    m.context = o.context ? o.context : (m.model_max_positions ? m.model_max_positions : 8192);
    check_positions(m, o);
    m.decode_batch = o.max_num_seqs;
    m.prefill_tokens = std::min(o.max_batched_tokens, m.context);
    if (o.tp != 1)
      throw InvalidInput(
          "--tp splits a checkpoint's weights; an ONNX export is one rank's graph already");
    s = plan_onnx_steps(model, o, m.context, m.decode_batch, m.prefill_tokens);
    m.kv = s.kv;
    m.kv_window_source = s.window_source;
    m.weights_bytes = s.weights;
    m.weight_blocks = s.weight_blocks;
    m.activation_source =
        fmt::format("the larger, planned from the ONNX graph ({} lifetimes)", o.runtime);
    m.planned = true;
  }
  m.tp = o.tp;
  m.decode = std::move(s.decode);
  m.prefill = std::move(s.prefill);
  if (m.kv.bytes_per_token() == 0 && m.kv.bytes_per_sequence() == 0)
    throw InvalidInput(model + ": the model has no KV cache to size");
  // The weights and the steps on the strategy that serves them, as `plan` sizes every quota.
  NeedOptions need;
  need.strategy = o.strategy;
  need.inferences = kRounds;
  std::vector<const ServedStep*> rounds;
  for (std::size_t r = 0; r < kRounds; ++r) rounds.insert(rounds.end(), {&m.prefill, &m.decode});
  m.need =
      need_of_sequence(serving_trace(model, m.weight_blocks, rounds), need, o.runtime == "eager");
  m.need.runtime = o.runtime;
  m.need.weights = m.weights_bytes;
  m.need.eager = checked_add(m.weights_bytes, std::max(m.decode.peak, m.prefill.peak), "need");
  return m;
}

ServePlan plan_serving(const std::string& model, const ServeOptions& o) {
  return plan_serving(serve_model(model, o), o);
}

ServePlan plan_serving(const ServedModel& m, const ServeOptions& o) {
  validate(o);
  const std::string& model = m.model;
  ServePlan p;
  p.model = model;
  p.source = m.source;
  p.activation_source = m.activation_source;
  p.formula_note = m.formula_note;
  p.kv_window_source = m.kv_window_source;
  p.model_max_positions = m.model_max_positions;
  p.model_positions_source = m.model_positions_source;
  p.context = m.context;
  p.decode_batch = m.decode_batch;
  p.prefill_tokens = m.prefill_tokens;
  p.kv = m.kv;
  p.weights_bytes = m.weights_bytes;
  p.device_memory = o.device_memory;
  p.block_size = o.block_size;
  p.tp = o.tp;
  const Overhead overhead = parse_overhead(o.overhead, o.backend, o.device_memory);
  p.overhead_bytes = overhead.bytes;
  p.overhead_source = overhead.source;
  std::vector<std::int64_t> lengths;
  if (!o.lengths_path.empty()) lengths = model::read_lengths(o.lengths_path);

  p.decode_activation_bytes = m.decode.peak;
  p.prefill_activation_bytes = m.prefill.peak;
  p.activation_peak_bytes = std::max(p.decode_activation_bytes, p.prefill_activation_bytes);
  p.kv_bytes_per_token = p.kv.bytes_per_token();
  p.kv_block_bytes =
      checked_mul(p.kv_bytes_per_token, static_cast<std::size_t>(p.block_size), "KV block bytes");
  p.need = m.need;
  p.need.overhead = overhead;
  p.need.total = checked_add(p.need.need, overhead.bytes, "total need");
  p.activation_bytes = p.need.need > p.weights_bytes ? p.need.need - p.weights_bytes : 0;
  const std::size_t non_kv = p.need.total;
  if (non_kv >= o.device_memory)
    throw InvalidInput(fmt::format(
        "{}: the need of the weights and a step on {} ({}: weights {} + activations {}) + "
        "overhead {} = {} does not leave room for a KV cache on a device of {}",
        model, p.need.strategy, format_bytes(p.need.need), format_bytes(p.weights_bytes),
        format_bytes(p.activation_bytes), format_bytes(p.overhead_bytes), format_bytes(non_kv),
        format_bytes(o.device_memory)));
  const std::size_t room = o.device_memory - non_kv;
  p.kv_blocks = p.kv_block_bytes ? room / p.kv_block_bytes : 0;
  if (p.kv_blocks == 0)
    throw InvalidInput(
        fmt::format("{}: {} left after the need and the overhead is less than one KV block of {}",
                    model, format_bytes(room), format_bytes(p.kv_block_bytes)));
  p.kv_cache_bytes = p.kv_blocks * p.kv_block_bytes;
  p.kv_tokens = p.kv_blocks * static_cast<std::size_t>(p.block_size);
  p.sequence_bytes = p.kv.sequence_bytes(p.context, p.block_size);
  p.max_concurrency = p.sequence_bytes ? static_cast<double>(p.kv_cache_bytes) /
                                             static_cast<double>(p.sequence_bytes)
                                       : 0;
  p.max_sequences = p.sequence_bytes ? p.kv_cache_bytes / p.sequence_bytes : 0;
  const std::int64_t cap = p.model_max_positions > 0 && !o.ignore_model_limits
                               ? std::max(p.model_max_positions, p.context)
                               : (1LL << 40);
  p.max_context = longest_context(p.kv, p.kv_cache_bytes, p.block_size, cap, p.max_context_capped);

  if (!lengths.empty() || o.mean_context) {
    double mean_bytes = 0;
    if (!lengths.empty()) {
      p.requests = lengths.size();
      double tokens = 0;
      for (auto l : lengths) {
        tokens += static_cast<double>(l);
        mean_bytes += static_cast<double>(p.kv.sequence_bytes(l, p.block_size));
        if (l > p.context) ++p.lengths_over_context;
      }
      p.mean_request_tokens = tokens / static_cast<double>(lengths.size());
      mean_bytes /= static_cast<double>(lengths.size());
    } else {
      p.mean_request_tokens = *o.mean_context;
      mean_bytes = static_cast<double>(
          p.kv.sequence_bytes(static_cast<std::int64_t>(std::ceil(*o.mean_context)), p.block_size));
    }
    p.mean_concurrency = static_cast<double>(p.kv_cache_bytes) / mean_bytes;
  }
  add_engines(p, o);
  return p;
}

}  // namespace modelmem::sizing
