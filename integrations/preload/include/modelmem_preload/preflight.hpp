// What `modelmem run` knows of the LD_PRELOAD library: the configuration it runs with by
// default, and its preflight (what the library checks at start-up, checked before the program
// starts). The one header of integrations/preload/ that tools/ can reach: the library's other
// headers are private to it (the build gives tools/ this folder only).
#pragma once

#include <string>

namespace modelmem::preload {

/// The configuration the library runs with when MODELMEM_ALLOC_CONF is unset or empty.
inline constexpr const char* kDefaultConf = "strategy:planned";

/// "" when the library would serve requests with this configuration (MODELMEM_ALLOC_CONF =
/// `conf`, "" = kDefaultConf) and trace file, else why it would not.
std::string preflight(const std::string& conf, const std::string& trace_path);

}  // namespace modelmem::preload
