// `modelmem plan` with the need on the strategy (modelmem/sizing/plan_need.hpp).
#include "modelmem/sizing/plan_need.hpp"

#include <fmt/format.h>

#include <cmath>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::sizing {

namespace {

NeedOptions need_options(const SizingOptions& sizing, std::size_t device_memory) {
  NeedOptions o;
  o.strategy = sizing.strategy;
  o.inferences = sizing.inferences;
  o.overhead = parse_overhead(sizing.overhead, sizing.backend, device_memory);
  o.min_request = min_request_of(sizing.backend, sizing.strategy);
  return o;
}

double percent(long long part, std::size_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

std::size_t min_request_of(Backend backend, const std::string& strategy) {
  // PyTorch on the host reaches the pools through the LD_PRELOAD library, which leaves requests
  // below preload_threshold_kb (64 KiB unless the strategy string says) to the C library.
  if (backend != Backend::kHost) return 0;
  const std::string given = strategy_config(strategy);
  const std::size_t at = given.find("preload_threshold_kb:");
  if (at == std::string::npos) return 64 * 1024;
  return 1024 * std::stoull(given.substr(at + std::string("preload_threshold_kb:").size()));
}

void validate(const SizingOptions& sizing, std::size_t device_memory) {
  strategy_config(sizing.strategy);
  parse_overhead(sizing.overhead, sizing.backend, device_memory);
  if (sizing.inferences == 0) throw InvalidInput("inferences: at least one");
  // The same range the runtime's pools take (PoolSpec::from_plan): a pool sized beyond it would
  // print a configuration `modelmem config` refuses.
  if (sizing.safety && !(*sizing.safety >= 1.0 && *sizing.safety <= 100.0))
    throw InvalidInput(
        fmt::format("--safety {}: out of range: a factor from 1 to 100", *sizing.safety));
}

std::size_t quota_of(std::size_t need, const std::optional<double>& safety) {
  if (!safety) return need;
  return static_cast<std::size_t>(std::ceil(static_cast<double>(need) * *safety / kMiB)) * kMiB;
}

PoolNeed need_of(const model::ModelPlan& plan, const SizingOptions& sizing,
                 std::size_t device_memory) {
  return need_on_strategy(plan, need_options(sizing, device_memory));
}

ModelNeed plan_need(const std::string& path, const model::PlanOptions& options,
                    const SizingOptions& sizing, std::size_t device_memory) {
  validate(sizing, device_memory);
  ModelNeed mn;
  mn.plan = model::plan_model(path, options);
  mn.need = need_of(mn.plan, sizing, device_memory);
  mn.safety = sizing.safety;
  return mn;
}

std::string render_text(const ModelNeed& mn, const model::TextOptions& options) {
  const PoolNeed& n = mn.need;
  std::string out = model::render_text(mn.plan, options);
  out += fmt::format(
      "need           {} on {}: the {} allocation sequence (weights and {} inferences, {} "
      "requests{}) run through the pool `modelmem run` builds; {} MiB does not serve it\n",
      model::bytes_text(n.need), n.strategy, n.runtime, n.inferences, n.requests,
      n.min_request
          ? fmt::format(" of at least {}, as the preload sends", format_bytes(n.min_request))
          : "",
      n.replay_mib - 1);
  if (n.order_slack > 0)
    out += fmt::format(
        "               = {} MiB replayed + {} for PyTorch's own order (two segments, or half the "
        "largest request up to 64 MiB)\n",
        n.replay_mib, format_bytes(n.order_slack));
  out += fmt::format(
      "               live at the peak {}, reserved {}, {:.2f}x the live bytes\n",
      format_bytes(n.peak_live), format_bytes(n.peak_reserved),
      n.peak_live == 0 ? 0.0 : static_cast<double>(n.need) / static_cast<double>(n.peak_live));
  if (mn.safety) {
    // The pool to give the model, and the seed's preset for its family beside it.
    const model::FamilyPreset& preset = mn.plan.preset;
    out += fmt::format("quota          {} = need {} x {} (--safety, whole MiB)\n",
                       model::bytes_text(mn.quota()), format_bytes(n.need), *mn.safety);
    out += fmt::format(
        "seed preset    {}: {} x {} = {} ({:.1f}x the need above, {})\n", preset.family,
        format_bytes(preset.pool_bytes), preset.factor, model::bytes_text(preset.provisioned()),
        n.need ? static_cast<double>(preset.provisioned()) / static_cast<double>(n.need) : 0.0,
        format_bytes(n.need));
  }
  out += fmt::format("overhead       {}: {}\n", format_bytes(n.overhead.bytes), n.overhead.source);
  out += fmt::format("need total     {} = need {} + overhead {}\n", model::bytes_text(n.total),
                     format_bytes(n.need), format_bytes(n.overhead.bytes));
  return out;
}

nlohmann::json need_json(const PoolNeed& n) {
  return {{"strategy", n.strategy},
          {"need_bytes", n.need},
          {"need_runtime", n.runtime},
          {"need_replay_bytes", n.replay_mib * (std::size_t{1} << 20)},
          {"order_slack_bytes", n.order_slack},
          {"peak_live_bytes", n.peak_live},
          {"peak_reserved_bytes", n.peak_reserved},
          {"overhead_bytes", n.overhead.bytes},
          {"overhead_source", n.overhead.source},
          {"need_total_bytes", n.total}};
}

std::string render_json_text(const ModelNeed& mn) {
  std::vector<std::pair<std::string, std::string>> extra;
  nlohmann::json need = need_json(mn.need);
  if (mn.safety) {
    need["safety"] = *mn.safety;
    need["quota_bytes"] = mn.quota();
  }
  for (const auto& [key, value] : need.items()) extra.emplace_back(key, value.dump());
  return model::render_json_text(mn.plan, extra);
}

nlohmann::json render_json(const ModelNeed& mn) {
  return nlohmann::json::parse(render_json_text(mn));
}

long long DeviceNeed::headroom() const {
  return static_cast<long long>(plan.device_memory) - static_cast<long long>(total);
}

DeviceNeed plan_device(const std::vector<std::string>& paths, const model::PlanOptions& options,
                       std::size_t device_memory, const SizingOptions& sizing) {
  validate(sizing, device_memory);
  DeviceNeed dn;
  dn.plan = model::plan_device(paths, options, device_memory);
  dn.overhead = parse_overhead(sizing.overhead, sizing.backend, device_memory);
  dn.plan.total_quota = 0;
  for (std::size_t i = 0; i < dn.plan.plans.size(); ++i) {
    PoolNeed n = need_of(dn.plan.plans[i], sizing, device_memory);
    const std::size_t quota = quota_of(n.need, sizing.safety);
    dn.plan.models[i].quota = quota;
    dn.plan.total_quota = checked_add(dn.plan.total_quota, quota, "total quota");
    dn.needs.push_back(std::move(n));
  }
  dn.total = checked_add(dn.plan.total_quota, dn.overhead.bytes, "device total");
  return dn;
}

std::string render_text(const DeviceNeed& dn) {
  const model::DevicePlan& dp = dn.plan;
  const std::string strategy = dn.needs.empty() ? "" : dn.needs.front().strategy;
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line(fmt::format("device         {} shared by {} models: each pool's quota is its {} need on {}",
                   model::bytes_text(dp.device_memory), dp.models.size(),
                   model::runtime_name(dp.runtime), strategy));
  line(dp.runtime == model::Runtime::kEager
           ? "runtime        eager: the models run under PyTorch or torch_npu (--runtime static "
             "for ONNX Runtime or a compiled graph)"
           : "runtime        static: the models run under a static executor, ONNX Runtime or a "
             "compiled graph (--runtime eager for PyTorch or torch_npu)");
  line(fmt::format("  {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}", "pool", "weights",
                   "need ideal", "need eager", "need", "quota", "reserved"));
  for (std::size_t i = 0; i < dp.models.size(); ++i) {
    const model::ModelShare& s = dp.models[i];
    const PoolNeed& n = dn.needs[i];
    line(fmt::format("  {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}", s.pool,
                     format_bytes(s.weights), format_bytes(s.ideal), format_bytes(s.eager),
                     format_bytes(n.need), format_bytes(s.quota), format_bytes(n.peak_reserved),
                     dp.plans[i].graph.source));
  }
  line(fmt::format("  {:<16} {:>11} {:>11} {:>11} {:>11} {:>11}", "together", "",
                   format_bytes(dp.total_ideal), format_bytes(dp.total_eager), "",
                   format_bytes(dp.total_quota)));
  line(fmt::format("overhead       {}: {}", format_bytes(dn.overhead.bytes), dn.overhead.source));
  const long long headroom = dn.headroom();
  if (dn.fits())
    line(
        fmt::format("fit            yes: the quotas and the overhead take {} of {}, headroom {} "
                    "({:.1f}%)",
                    format_bytes(dn.total), format_bytes(dp.device_memory),
                    model::bytes_text(static_cast<std::size_t>(headroom)),
                    percent(headroom, dp.device_memory)));
  else
    line(fmt::format("fit            no: the quotas and the overhead take {} of {}, {} short",
                     format_bytes(dn.total), format_bytes(dp.device_memory),
                     model::bytes_text(static_cast<std::size_t>(-headroom))));
  if (dp.models.size() > 1 && dn.overhead.bytes > 0)
    line(fmt::format("               (one process; each model in its own process adds {} more)",
                     format_bytes(dn.overhead.bytes)));
  for (std::size_t i = 0; i < dp.models.size(); ++i)
    line(fmt::format("config         {}: {}", dp.models[i].pool, dp.config_string(i)));
  line(fmt::format("config         one process, every model: {}", dp.config_string_all()));
  return out;
}

nlohmann::json render_json(const DeviceNeed& dn) {
  const model::DevicePlan& dp = dn.plan;
  nlohmann::json j;
  j["device_memory_bytes"] = dp.device_memory;
  j["runtime"] = model::runtime_name(dp.runtime);
  j["strategy"] = dn.needs.empty() ? "" : dn.needs.front().strategy;
  j["fits"] = dn.fits();
  j["headroom_bytes"] = dn.headroom();
  j["total_ideal_bytes"] = dp.total_ideal;
  j["total_eager_bytes"] = dp.total_eager;
  j["total_quota_bytes"] = dp.total_quota;
  j["overhead_bytes"] = dn.overhead.bytes;
  j["overhead_source"] = dn.overhead.source;
  j["total_bytes"] = dn.total;
  auto& models = j["models"] = nlohmann::json::array();
  for (std::size_t i = 0; i < dp.models.size(); ++i) {
    const model::ModelShare& s = dp.models[i];
    nlohmann::json m = {{"model", s.model},
                        {"pool", s.pool},
                        {"weights_bytes", s.weights},
                        {"ideal_arena_bytes", dp.plans[i].ideal_arena},
                        {"eager_peak_bytes", dp.plans[i].eager_peak},
                        {"need_ideal_bytes", s.ideal},
                        {"need_eager_bytes", s.eager},
                        {"quota_bytes", s.quota},
                        {"config", dp.config_string(i)}};
    const nlohmann::json need = need_json(dn.needs[i]);
    for (const auto& [key, value] : need.items())
      if (key.rfind("overhead", 0) != 0 && key != "need_total_bytes") m[key] = value;
    models.push_back(std::move(m));
  }
  j["config"] = dp.config_string_all();
  return j;
}

}  // namespace modelmem::sizing
