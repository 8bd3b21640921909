// torch_npu's allocator settings in modelmem: which configuration string the NPU pluggable
// library builds its stacks from (MODELMEM_ALLOC_CONF when set, else torch_npu's
// PYTORCH_NPU_ALLOC_CONF or PYTORCH_ALLOC_CONF translated: the keys that mean the same as
// modelmem's carried over, every other torch_npu key refused by name with the reason), the same
// for the library, `modelmem config` and Python.
#pragma once

#include <string>
#include <string_view>

namespace modelmem::config {

struct EnvironmentConf {
  std::string text;      ///< a modelmem config string
  std::string variable;  ///< "MODELMEM_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", ... ; "" = none set
  bool translated = false;  ///< from torch_npu's variable, translated
};

/// Reads the environment as the NPU library does. Throws InvalidInput when both torch_npu
/// variables are set (torch_npu refuses that too) or a torch_npu key has no modelmem meaning.
EnvironmentConf environment_conf();

/// Translates a torch_npu allocator string; `variable` names it in messages. Kept: the keys
/// modelmem shares with PyTorch (expandable_segments, max_split_size_mb,
/// garbage_collection_threshold, roundup_power2_divisions, per_process_memory_fraction). Where
/// expandable segments are unsupported, modelmem's default fallback is torch_npu's (the caching
/// pool with fixed-size segments).
std::string translate_torch_npu_conf(std::string_view text, const std::string& variable);

}  // namespace modelmem::config
