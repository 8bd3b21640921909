// torch_npu's allocator settings in modelmem: which configuration string the NPU pluggable
// library builds its stacks from (MODELMEM_ALLOC_CONF when set, else torch_npu's
// PYTORCH_NPU_ALLOC_CONF or PYTORCH_ALLOC_CONF translated), the same for the library,
// `modelmem config` and Python. Every key torch_npu accepts is accepted: the keys modelmem can
// honour are carried over, the others are mapped to modelmem's nearest behaviour with one note
// each saying what was done. What torch_npu itself refuses (an unknown key, a value out of its
// range, max_split_size_mb or garbage_collection_threshold with expandable_segments:True) is
// refused with torch_npu's reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace modelmem::config {

struct EnvironmentConf {
  std::string text;      ///< a modelmem config string
  std::string variable;  ///< "MODELMEM_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", ... ; "" = none set
  bool translated = false;  ///< from torch_npu's variable, translated
  /// One line per torch_npu key modelmem maps to a nearer behaviour of its own ("VARIABLE:
  /// key:value: what modelmem does instead"); printed once per process by whoever builds.
  std::vector<std::string> notes;
};

/// Reads the environment as the NPU library does. Throws InvalidInput when both torch_npu
/// variables are set (torch_npu refuses that too) or torch_npu would refuse the string.
EnvironmentConf environment_conf();

struct TorchNpuConf {
  std::string text;                ///< the modelmem config string
  std::vector<std::string> notes;  ///< see EnvironmentConf::notes
};

/// Translates a torch_npu allocator string; `variable` names it in messages and notes. Kept:
/// the keys modelmem shares with PyTorch (expandable_segments, max_split_size_mb,
/// garbage_collection_threshold, roundup_power2_divisions, per_process_memory_fraction,
/// large_segment_size_mb; segment_size_mb, deprecated in torch_npu, as large_segment_size_mb).
/// Where expandable segments are unsupported, modelmem's default fallback is torch_npu's (the
/// caching pool with fixed-size segments). Throws InvalidInput where torch_npu refuses.
TorchNpuConf read_torch_npu_conf(std::string_view text, const std::string& variable);

/// read_torch_npu_conf(text, variable).text.
std::string translate_torch_npu_conf(std::string_view text, const std::string& variable);

}  // namespace modelmem::config
