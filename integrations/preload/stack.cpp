// What a configuration builds for the LD_PRELOAD library (stack.hpp), checked the same way by
// `modelmem run` before the program starts.
#include "stack.hpp"

#include <exception>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "preload_keys.hpp"

namespace modelmem::preload {

std::string trace_path_problem(const std::string& path) {
  if (path.empty()) return "";
  const std::string problem = core::output_file_problem(path, core::OutputWrite::kInPlace);
  return problem.empty() ? "" : "cannot write trace " + path + ": " + problem;
}

Stack build_stack(const std::string& conf, const std::string& trace_path, bool check_only) {
  Stack s;
  register_config_keys();  // the preload's own keys (preload_keys.cpp), before parsing
  s.config = config::parse_config(conf.empty() ? kDefaultConf : conf);
  if (s.config.get("strategy") == "system") {
    s.off = true;
    return s;
  }
  if (std::string problem = trace_path_problem(trace_path); !problem.empty())
    throw InvalidInput(problem);
  s.threshold = s.config.get_size("preload_threshold_kb") << 10;
  s.cache_bytes = s.config.get_size("preload_cache_kb") << 10;
  const std::size_t reserve = checked_mul(s.config.get_size("preload_reserve_gb"),
                                          std::size_t{1} << 30, "preload_reserve_gb");
  s.region = std::make_shared<RegionDevice>(reserve, !check_only && s.config.get_bool("prefault"),
                                            s.config.get_bool("huge_pages"));
  // Those two are the region's (host memory) settings, taken here: build() would refuse them
  // for a device it did not make itself.
  config::Config c = s.config;
  std::erase_if(c.explicit_keys,
                [](const std::string& k) { return k == "huge_pages" || k == "prefault"; });
  s.built = config::build(c, s.region);
  return s;
}

std::string preflight(const std::string& conf, const std::string& trace_path) {
  try {
    config::QuietWarnings quiet;  // the preloaded program prints the fallback warning itself
    Stack s = build_stack(conf, trace_path, /*check_only=*/true);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace modelmem::preload
