// The LD_PRELOAD library's configuration keys, registered with the config layer (the core's key
// table knows nothing of the preload). Standard library only: the `modelmem` tool and the tests
// link this file too, so `modelmem config --keys` lists these keys and `modelmem run` checks
// them before it starts a program. Registered when the file is loaded (a static initialiser)
// and again, idempotently, by build_stack (stack.cpp) before it parses MODELMEM_ALLOC_CONF.
#include "preload_keys.hpp"

#include "modelmem/config/config.hpp"

namespace modelmem::preload {

void register_config_keys() {
  static const config::KeyRegistration kKeys[] = {
      {{"preload_threshold_kb", "64", "whole number > 0",
        "LD_PRELOAD library: requests of at least this many KiB go to modelmem, the rest to "
        "the C library"},
       config::check_positive_number},
      {{"preload_cache_kb", "1024", "whole number",
        "LD_PRELOAD library: per-thread cache of freed small blocks in front of the C library "
        "(KiB per thread; 0: off; not used when another allocator is preloaded after modelmem)"},
       config::check_whole_number},
      {{"preload_reserve_gb", "256", "whole number > 0",
        "LD_PRELOAD library: address space reserved for modelmem's memory (GiB, no memory)"},
       config::check_positive_number},
  };
  config::register_keys(kKeys);
}

namespace {
[[maybe_unused]] const bool g_registered = (register_config_keys(), true);
}  // namespace

}  // namespace modelmem::preload
