// What libmodelmem_preload.so builds at start-up, as a function both the library and
// `modelmem run` call: the library to build its stack, `run` to refuse, before the program
// starts, a configuration the library would refuse (it would disable itself inside the program;
// preflight() and kDefaultConf, in the public modelmem_preload/preflight.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem_preload/preflight.hpp"
#include "region_device.hpp"

namespace modelmem::preload {

struct Stack {
  bool off = false;  ///< strategy:system: every request goes to the next allocator
  std::shared_ptr<RegionDevice> region;  ///< declared first: outlives the allocators
  config::Config config;
  config::Built built;
  std::size_t threshold = 0;    ///< preload_threshold_kb in bytes
  std::size_t cache_bytes = 0;  ///< preload_cache_kb in bytes
};

/// Builds the stack for MODELMEM_ALLOC_CONF = `conf` ("" = kDefaultConf) and MODELMEM_TRACE =
/// `trace_path` ("" = none). Throws Error (InvalidInput, Unsupported, OutOfMemory) with the
/// reason the library would disable itself. `check_only`: nothing is touched (no prefault), the
/// result is only looked at.
Stack build_stack(const std::string& conf, const std::string& trace_path, bool check_only);

/// "" when a trace can be written to `path` at exit, else why not ("cannot write trace PATH:
/// folder DIR does not exist"; core::output_file_problem).
std::string trace_path_problem(const std::string& path);

}  // namespace modelmem::preload
