// Which configuration string the NPU pluggable library builds its stacks from: MODELMEM_ALLOC_CONF
// when set, else torch_npu's PYTORCH_NPU_ALLOC_CONF (or PYTORCH_ALLOC_CONF) with the keys that
// mean the same as modelmem's carried over and the others refused by name, saying what to use.
#pragma once

#include <string>
#include <string_view>

namespace modelmem::npu {

struct ConfText {
  std::string text;    ///< a modelmem config string
  std::string source;  ///< "MODELMEM_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF (translated)", ...
};

/// Reads the environment. Throws InvalidInput when both torch_npu variables are set (torch_npu
/// refuses that too) or a torch_npu key has no modelmem meaning.
ConfText conf_from_env();

/// Translates a torch_npu allocator string; `variable` names it in messages. Kept: the keys
/// modelmem shares with PyTorch (expandable_segments, max_split_size_mb,
/// garbage_collection_threshold, roundup_power2_divisions, per_process_memory_fraction). With
/// expandable_segments:True the fallback is the caching pool, as in torch_npu.
std::string translate_torch_npu_conf(std::string_view text, const std::string& variable);

}  // namespace modelmem::npu
