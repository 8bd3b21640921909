// The LD_PRELOAD library's configuration keys, registered with the config layer (the core's key
// table knows nothing of the preload). Standard library only: the `modelmem` tool and the tests
// link this file too, so `modelmem config --keys` lists these keys and `modelmem run` checks
// them before it starts a program. Registered when the file is loaded (a static initialiser)
// and again, idempotently, by build_stack (stack.cpp) before it parses MODELMEM_ALLOC_CONF.
#include "preload_keys.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include "modelmem/config/config.hpp"

namespace modelmem::preload {
namespace {

// KiB whose bytes fit in 64 bits (a larger threshold wrapped to 0 before: every request to
// modelmem).
std::string check_kb(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 1, SIZE_MAX >> 10, "KiB");
}
std::string check_kb_or_zero(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 0, SIZE_MAX >> 10, "KiB");
}
// At most 128 TiB, the whole user address space of x86-64 and AArch64 Linux (48-bit).
std::string check_reserve_gb(const std::string& key, std::string_view v) {
  return config::check_whole_number_in(key, v, 1, 131072, "GiB");
}

}  // namespace

void register_config_keys() {
  static const config::KeyRegistration kKeys[] = {
      {{"preload_threshold_kb", "64", "KiB in [1, 2^54)",
        "LD_PRELOAD library: requests of at least this many KiB go to modelmem, the rest to "
        "the C library"},
       check_kb},
      {{"preload_cache_kb", "1024", "KiB in [0, 2^54)",
        "LD_PRELOAD library: per-thread cache of freed small blocks in front of the C library "
        "(KiB per thread; 0: off; not used when another allocator is preloaded after modelmem)"},
       check_kb_or_zero},
      {{"preload_reserve_gb", "256", "GiB in [1, 131072]",
        "LD_PRELOAD library: address space reserved for modelmem's memory (GiB, no memory)"},
       check_reserve_gb},
  };
  config::register_keys(kKeys);
}

namespace {
[[maybe_unused]] const bool g_registered = (register_config_keys(), true);
}  // namespace

}  // namespace modelmem::preload
