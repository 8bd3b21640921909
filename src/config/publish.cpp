// What a pluggable library publishes for its stack (modelmem/config/publish.hpp).
#include "modelmem/config/publish.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "modelmem/alloc/pool_router.hpp"

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::config {

monitor::PoolInfo pool_info(const Config& config, const Built& built,
                            const std::string& default_name, const std::string& device) {
  monitor::PoolInfo info;
  const char* name = std::getenv("MODELMEM_POOL_NAME");
  info.name = name != nullptr && *name ? name : default_name;
  if (!core::valid_pool_name(info.name))
    throw InvalidInput("MODELMEM_POOL_NAME: '" + core::printable(info.name) +
                       "' is not a pool name (" + core::pool_name_rule() + ")");
  info.device = device;
  const std::string strategy = built.setting("strategy");
  info.strategy = strategy == "caching" && built.setting("expandable_segments") == "True"
                      ? "expandable"
                      : strategy;
  if (config.has("static_pool_mb")) info.budget = config.get_size_mb("static_pool_mb");
  return info;
}

std::vector<monitor::PoolRegistration> publish_stack(const Config& config, const Built& built,
                                                     const std::string& default_name,
                                                     const std::string& device) {
  std::vector<monitor::PoolRegistration> out;
  monitor::PoolInfo info = pool_info(config, built, default_name, device);
  if (built.allocator->pools().empty()) {
    out.push_back(monitor::publish(built.allocator, info));
    return out;
  }
  // A router owns the pools; each is shown on its own, as long as the stack lives (forever in
  // the libraries); its main stack (upstream) too.
  if (alloc::Allocator* main = built.allocator->upstream()) {
    info.budget = 0;
    out.push_back(monitor::publish(std::shared_ptr<alloc::Allocator>(built.allocator, main), info));
  }
  for (const alloc::NamedPool& p : built.allocator->pools())
    out.push_back(monitor::publish(p.allocator, {p.name, device, info.strategy, p.quota}));
  return out;
}

int push_pool(alloc::Allocator& stack, const char* name, std::string& why) {
  if (stack.pools().empty()) return 1;
  if (name == nullptr || !core::valid_pool_name(name)) {
    why = "'" + core::printable(name ? name : "(null)") + "' is not a pool name (" +
          core::pool_name_rule() + ")";
    return -1;
  }
  try {
    alloc::push_pool(stack, name);
    return 0;
  } catch (const std::exception& e) {
    why = e.what();
    return -1;
  }
}

int pop_pool(alloc::Allocator& stack, std::string& why) {
  if (stack.pools().empty()) return 1;
  if (alloc::pop_pool()) return 0;
  why = "no pool was selected on this thread";
  return -1;
}

void report_failed_free(std::string& last_error, const void* ptr, const char* device,
                        const char* why) noexcept {
  char text[640];
  std::snprintf(text, sizeof text, "free of %p%s%s failed: %s", ptr, device ? " on " : "",
                device ? device : "", why);
  std::fprintf(stderr, "modelmem: %s\n", text);
  try {
    last_error = text;
  } catch (...) {  // no memory for the message: the old one is cleared rather than kept
    last_error.clear();
  }
}

}  // namespace modelmem::config
