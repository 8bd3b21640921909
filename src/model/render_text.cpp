// The text of `modelmem plan` (modelmem/model/render.hpp): one model's report, and the table of
// several models sharing a device.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "modelmem/core/error.hpp"
#include "modelmem/model/render.hpp"

namespace modelmem::model {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string planned_float_name(const std::string& dtype) {
  return dtype == "fp16" ? "float16" : dtype == "bf16" ? "bfloat16" : "float32";
}

// "(float32 as stored)", "(float32 planned as float16)", "(float16 as stored)": what the
// activation bytes are counted at. The stored type named is the one holding most bytes.
std::string activation_dtype_note(const ModelPlan& mp) {
  std::map<std::int32_t, std::size_t> bytes;
  for (const auto& t : mp.graph.tensors)
    if (t.kind == TensorKind::kActivation || t.kind == TensorKind::kInput)
      bytes[t.dtype] += t.bytes;
  constexpr std::int32_t kFloat = 1;
  std::int32_t main = kFloat;
  std::size_t most = 0;
  for (const auto& [dtype, b] : bytes)
    if (b > most) most = b, main = dtype;
  if (mp.float_bytes == 4) return dtype_name(main) + " as stored";
  if (bytes.count(kFloat) && bytes[kFloat] > 0)
    return "float32 planned as " + planned_float_name(mp.options.dtype);
  return dtype_name(main) + " as stored: no float32 activations to convert";
}

double ratio(std::size_t a, std::size_t b) {
  return b ? static_cast<double>(a) / static_cast<double>(b) : 1.0;
}

}  // namespace

std::string bytes_text(std::size_t b) {
  // Thousands separators without depending on the locale.
  std::string digits = std::to_string(b), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out + " B (" + format_bytes(b) + ")";
}

std::string chain_text(const std::vector<std::string>& names, std::size_t max_chain) {
  if (names.empty()) return "";
  if (names.size() > std::max<std::size_t>(max_chain, 2))
    return fmt::format("{} = ... = {} ({} tensors)", names.front(), names.back(), names.size());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " = ") + n;
  return out;
}

std::string render_text(const ModelPlan& mp, const TextOptions& options) {
  const Graph& graph = mp.graph;
  const Lifetimes& lt = mp.plan.lifetimes;
  const std::size_t arena = mp.arena();
  const bool eager = mp.options.runtime == Runtime::kEager;
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };

  std::string dims_text;
  for (const auto& [k, v] : graph.dims)
    dims_text += fmt::format("{}{}={}", dims_text.empty() ? "" : ", ", k, v);
  std::size_t activations = 0;
  for (const auto& t : graph.tensors)
    if (t.kind == TensorKind::kActivation || t.kind == TensorKind::kInput) ++activations;
  line(fmt::format(
      "model          {}{}: {} nodes, {} tensors ({} folded to constants at load), family {}",
      graph.source, dims_text.empty() ? "" : " (" + dims_text + ")", graph.nodes.size(),
      graph.tensors.size(), graph.folded_nodes, mp.family));
  std::string weights_note = "separate region";
  if (mp.weights_bytes != mp.weights_stored_bytes)
    weights_note +=
        fmt::format("; float32 planned as {}, stored {}", planned_float_name(mp.options.dtype),
                    format_bytes(mp.weights_stored_bytes));
  else if (mp.options.keep_weights_dtype)
    weights_note += "; kept as stored (--keep-weights-dtype)";
  line(fmt::format("weights        {} in {} initializers ({})", bytes_text(mp.weights_bytes),
                   lt.weights_count, weights_note));
  line(fmt::format("activations    {} tensors, {} without reuse ({})", lt.activation_count,
                   bytes_text(lt.activation_bytes_unshared), activation_dtype_note(mp)));
  line(fmt::format(
      "buffers        {} after {} in-place outputs and {} views of activations ({} of "
      "weights){}{}{}{}",
      lt.problem.buffers.size(), lt.in_place, lt.aliases, lt.weight_views,
      lt.workspaces ? fmt::format(", {} of them convolution workspaces", lt.workspaces) : "",
      lt.window_attentions ? fmt::format(", {} matmul operand copies in {} window attentions",
                                         lt.matmul_copies, lt.window_attentions)
                           : "",
      lt.attention_scopes ? fmt::format(", {} Python locals held in {} self-attentions",
                                        lt.attention_locals, lt.attention_scopes)
                          : "",
      lt.sdpa ? fmt::format(", {} attentions as one SDPA operator each (no scores)", lt.sdpa)
              : ""));
  if (mp.runs.size() > 1) {
    line(fmt::format("solvers        {:<16} {:>14} {:>9} {:>10}", "solver", "arena bytes",
                     "/ bound", "seconds"));
    for (const auto& r : mp.runs)
      line(fmt::format("               {:<16} {:>14} {:>9.4f} {:>10.4f}{}", r.solver, r.arena,
                       ratio(r.arena, mp.plan.lower_bound), r.seconds,
                       r.proven_optimal ? "  optimal" : ""));
  }
  line(fmt::format("planned arena  {} by {} in {:.3f} s{}{}", bytes_text(arena),
                   mp.plan.solve.solver, mp.plan.solve.seconds,
                   mp.plan.solve.proven_optimal ? " (proven optimal)" : "",
                   eager ? ", for the eager runtime" : ""));
  line(fmt::format("lower bound    {}; arena / lower bound = {:.4f}",
                   bytes_text(mp.plan.lower_bound), ratio(arena, mp.plan.lower_bound)));
  line(
      fmt::format("ideal arena    {}: a static executor with in-place reuse (modelmem's planned "
                  "arena, ONNX Runtime){}",
                  bytes_text(mp.ideal_arena), eager ? "" : " [planned]"));
  std::string counted = "no in-place reuse, tensors freed after their last use";
  if (mp.options.eager_module_scopes) counted += ", module arguments held";
  if (mp.options.eager_conv_workspace) counted += ", oneDNN convolution copies";
  line(fmt::format("eager peak     {} live: PyTorch eager ({}), {:.2f}x the ideal{}",
                   bytes_text(mp.eager_peak), counted, ratio(mp.eager_peak, mp.ideal_arena),
                   eager ? " [planned]" : ""));
  line(fmt::format("total          {} = weights {} + {} arena {}", bytes_text(mp.total()),
                   format_bytes(mp.weights_bytes), runtime_name(mp.options.runtime),
                   format_bytes(arena)));

  int largest = -1;
  for (std::size_t t = 0; t < graph.tensors.size(); ++t) {
    if (lt.buffer_of[t] < 0) continue;
    if (largest < 0 || graph.tensors[t].bytes > graph.tensors[largest].bytes)
      largest = static_cast<int>(t);
  }
  if (largest >= 0) {
    const auto& t = graph.tensors[largest];
    line(fmt::format("largest tensor {} {} {}: {}", t.name, planned_dtype_name(t, mp.options.dtype),
                     shape_text(t.shape), bytes_text(activation_bytes(t, mp.float_bytes))));
  }
  if (!lt.order.empty()) {
    const plan::Peak& peak = mp.plan.peak;
    auto step = static_cast<std::size_t>(peak.step);
    line(fmt::format("peak           step {} of {}, {}: {} buffers live", step, lt.order.size(),
                     graph.describe_node(lt.order[step]), peak.live.size()));
    std::vector<std::size_t> live = peak.live;
    std::sort(live.begin(), live.end(), [&](std::size_t a, std::size_t b) {
      return lt.problem.buffers[a].size > lt.problem.buffers[b].size;
    });
    for (std::size_t i = 0; i < live.size() && i < options.show_live; ++i) {
      const auto& b = lt.problem.buffers[live[i]];
      std::vector<std::string> names;
      for (int t : lt.tensors_of[live[i]]) names.push_back(graph.tensors[t].name);
      line(fmt::format("                 {:>12}  steps {}..{}  {}", format_bytes(b.size), b.start,
                       b.end - 1, names.empty() ? b.id : chain_text(names, options.max_chain)));
    }
    if (live.size() > options.show_live)
      line(fmt::format("                 ... and {} more", live.size() - options.show_live));
  }
  if (mp.order) {
    line(fmt::format("order          memory ({}, {:.3f} s): peak {} vs stored order {}",
                     mp.order->method, mp.order->seconds, bytes_text(mp.order->peak),
                     bytes_text(mp.order->stored_peak)));
  } else {
    line("order          stored");
  }
  if (mp.options.buckets) {
    const BucketSpec& spec = *mp.options.buckets;
    std::size_t serving = 0;
    for (const auto& b : mp.buckets) {
      serving = std::max(serving, b.arena);
      line(fmt::format("bucket         {}={:<6} arena {}  lower bound {}", spec.dim, b.value,
                       bytes_text(b.arena), bytes_text(b.lower_bound)));
    }
    line(fmt::format("buckets        one arena serving every bucket: {}", bytes_text(serving)));
    if (mp.padding) {
      const PaddingReport& pad = *mp.padding;
      line(fmt::format(
          "padding        {} requests, {} tokens padded to {}: {:.1f}% of the padded tokens are "
          "waste",
          pad.requests, pad.tokens, pad.padded_tokens, 100.0 * pad.waste()));
      for (std::size_t i = 0; i < mp.buckets.size(); ++i)
        line(fmt::format("                 {}={:<6} {} requests", spec.dim, spec.values[i],
                         pad.per_bucket[i]));
      if (pad.too_long)
        line(fmt::format("                 {} requests longer than the largest bucket (not served)",
                         pad.too_long));
    }
  }
  return out;
}

}  // namespace modelmem::model
