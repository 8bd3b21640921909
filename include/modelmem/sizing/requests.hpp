// The requests Kubernetes schedulers and Ray consume for a Placement, and the environment that
// caps each container at exactly its request (docs/fleet.md: the units and fields of each
// system, with their sources). Pure functions of a Placement; YAML text out.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "modelmem/sizing/placement.hpp"

namespace modelmem::sizing {

/// Which scheduler's objects to emit.
enum class Target {
  kHami,  ///< HAMi device sharing: huawei.com/<chip>-memory or nvidia.com/gpumem, in MiB
  kVnpu,  ///< the Ascend device plugin's static vNPU templates (huawei.com/Ascend910-2c, ...)
  kDra,   ///< Dynamic Resource Allocation: DeviceClass + ResourceClaim (resource.k8s.io/v1)
  kRay,   ///< Ray Serve: an application per replica, a custom resource per device in MiB
};
Target parse_target(const std::string& text);  ///< hami, vnpu, dra, ray; InvalidInput else
std::string target_name(Target target);

/// The memory cap inside one replica's container, as each allocator computes it.
struct ContainerCap {
  std::size_t visible = 0;  ///< device memory the container sees (what the runtime calls total)
  std::size_t request = 0;  ///< the request: need + overhead, a whole number of MiB
  std::size_t need = 0;     ///< the allocator's share of it (the pool's quota), whole MiB
  /// per_process_memory_fraction, chosen so that size_t(fraction * visible) == need, which is
  /// how PyTorch, torch_npu and modelmem's caching pool turn it into a cap on what the allocator
  /// reserves; the overhead (context, workspaces) lies outside that cap, and the two make the
  /// request.
  double fraction = 1;
  std::string modelmem_conf;  ///< MODELMEM_ALLOC_CONF: STRATEGY, the model's pool, its quota
  std::map<std::string, std::string> engine_env;  ///< a served LLM's engine flags
  std::string torch_var;   ///< PYTORCH_NPU_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF
  std::string torch_conf;  ///< per_process_memory_fraction:F
  std::string seen;        ///< what the container sees, in words
};

/// The cap of replica `replica` (placed) under `target`. InvalidInput for an unplaced replica
/// or a target that does not apply to its device (vNPU on a GPU; a cpu budget outside Ray, where
/// torch_var is empty: the pool's quota is the only cap).
ContainerCap container_cap(const Placement& placement, std::size_t replica, Target target);

struct EmitOptions {
  bool pods = false;       ///< HAMi: one Pod per replica instead of a Deployment per model
  std::string ns;          ///< metadata.namespace ("" = none)
  std::string dra_driver;  ///< DRA: the driver the DeviceClass selects ("" = the kind's)
  std::string dra_capacity = "memory";  ///< DRA: the capacity name the driver publishes
  /// Ray: the Serve application builder each replica's application imports (MODULE:BUILDER);
  /// it gets args {model, replica, device} and returns an application whose deployment is
  /// named after the model.
  std::string ray_app = "app:build";
};

/// The objects for `target` as one YAML stream (documents separated by ---), with comments
/// stating each replica's device, template and waste. InvalidInput when the placement does
/// not fit or the target cannot express it (vNPU on GPUs, DRA without a driver name).
std::string emit(const Placement& placement, Target target, const EmitOptions& options = {});

}  // namespace modelmem::sizing
