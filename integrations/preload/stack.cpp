#include "stack.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "modelmem/core/error.hpp"
#include "preload_keys.hpp"

namespace modelmem::preload {

std::string trace_path_problem(const std::string& path) {
  if (path.empty()) return "";
  const std::string head = "cannot write trace " + path + ": ";
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return head + "it is a directory";
    // What the library's core::open_output_file refuses, said before the program starts.
    if (S_ISLNK(st.st_mode)) return head + "it is a symbolic link (not followed)";
    if (!S_ISREG(st.st_mode)) return head + "it is not a regular file";
    if (st.st_uid != geteuid()) return head + "it belongs to another user";
    if (st.st_nlink > 1) return head + "it has another hard link";
    if (access(path.c_str(), W_OK) != 0) return head + std::strerror(errno);
    return "";
  }
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0) return head + "no such directory " + dir;
  if (!S_ISDIR(st.st_mode)) return head + dir + " is not a directory";
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    return head + "directory " + dir + ": " + std::strerror(errno);
  return "";
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
