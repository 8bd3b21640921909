// `modelmem plan` with the need on the strategy that serves the model: model::plan_model() plus
// need_on_strategy() (modelmem/sizing/need.hpp) and the overhead, for one model or for several
// sharing a device. Every quota, total and fit verdict here is the need on the strategy (x
// --safety) plus the overhead. The CLI and the Python package call these and their renderers,
// so both print and write the same thing. Value types; each call owns its data.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/sizing/need.hpp"

namespace modelmem::sizing {

/// The flags of `plan` about the need (`--strategy`, `--overhead`, `--device-kind`).
struct SizingOptions {
  std::string strategy;  ///< strategy_config() text; "" = what `modelmem run` uses
  std::string overhead;  ///< parse_overhead() text; "" = the device kind's default
  Backend backend = Backend::kCuda;
  std::size_t inferences = 3;
  /// --safety F: each quota printed is the need x F, in whole MiB (a model alone, or each model
  /// sharing a device); from 1 to 100, the range the runtime's pools take.
  std::optional<double> safety;
};

/// Rejects a bad strategy, overhead or safety factor (InvalidInput naming the flag) before
/// anything is loaded.
void validate(const SizingOptions& options, std::size_t device_memory = 0);

/// The quota of a pool whose need is `need` under --safety `safety` (the need x F rounded up to
/// a whole MiB; the need itself without a factor).
std::size_t quota_of(std::size_t need, const std::optional<double>& safety);

/// One model: its plan and its need.
struct ModelNeed {
  model::ModelPlan plan;
  PoolNeed need;
  std::optional<double> safety;  ///< --safety F, when given
  /// The pool to give the model: quota_of(need, safety).
  std::size_t quota() const { return quota_of(need.need, safety); }
};

/// The smallest request that reaches the pools: on the host, the LD_PRELOAD library's
/// preload_threshold_kb (64 KiB unless `strategy` says); 0 on a device (every request does).
std::size_t min_request_of(Backend backend, const std::string& strategy);

ModelNeed plan_need(const std::string& path, const model::PlanOptions& options,
                    const SizingOptions& sizing, std::size_t device_memory = 0);
/// The need of an already planned model.
PoolNeed need_of(const model::ModelPlan& plan, const SizingOptions& sizing,
                 std::size_t device_memory = 0);

/// The plan's text (model::render_text) followed by the need, the overhead and the total.
std::string render_text(const ModelNeed& mn, const model::TextOptions& options = {});
/// The plan's JSON (model::render_json: the plan file the `plan:` key reads) with the need's
/// fields added: strategy, need_bytes, peak_reserved_bytes, overhead_bytes, overhead_source,
/// need_total_bytes. What `plan --json` writes.
nlohmann::json render_json(const ModelNeed& mn);
std::string render_json_text(const ModelNeed& mn);
/// The need's fields alone, as render_json adds them.
nlohmann::json need_json(const PoolNeed& need);

/// Several models sharing a device: each model's pool gets its need on the strategy (x
/// --safety, whole MiB) as quota; the process adds the overhead once.
struct DeviceNeed {
  model::DevicePlan plan;  ///< pools and per-model figures; quotas = the needs
  std::vector<PoolNeed> needs;
  Overhead overhead;
  std::size_t total = 0;  ///< quotas + overhead
  bool fits() const { return total <= plan.device_memory; }
  long long headroom() const;  ///< device memory - total; negative when it does not fit
};

DeviceNeed plan_device(const std::vector<std::string>& paths, const model::PlanOptions& options,
                       std::size_t device_memory, const SizingOptions& sizing);

std::string render_text(const DeviceNeed& dn);
nlohmann::json render_json(const DeviceNeed& dn);

}  // namespace modelmem::sizing
