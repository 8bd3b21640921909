// The LD_PRELOAD library's configuration keys (preload_threshold_kb, preload_cache_kb,
// preload_reserve_gb), registered with the config layer. Standard library only.
#pragma once

namespace modelmem::preload {

/// Registers the keys with config::register_keys (idempotent).
void register_config_keys();

}  // namespace modelmem::preload
