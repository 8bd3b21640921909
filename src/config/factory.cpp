// The factory: builds the allocator stack a parsed Config describes (device, virtual-memory
// probe, strategy, fallback) and sizes static pools.
#include "modelmem/config/factory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "config/internal.hpp"
#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/device/acl.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "modelmem/plan/plan_file.hpp"

namespace modelmem::config {

using namespace modelmem::alloc;

namespace {

using detail::bad;
using detail::kMiB;
using detail::preset;

// A caching pool on a small device (a per-model pool's view of 16 MiB, a small device:limited)
// takes segments of at most a quarter of it: with PyTorch's sizes, a 3 MiB request in a 4 MiB
// pool would ask for a 20 MiB segment and fail, and an 8 MiB one in a 16 MiB pool would take
// the whole pool for one block.
CachingOptions fit_segments(CachingOptions o, const device::Device& dev) {
  const std::size_t total = dev.memory_info().total;
  if (total / 4 >= o.large_segment) return o;
  const std::size_t quarter = total / 4;
  const std::size_t fit = std::max(quarter - quarter % o.round_large, o.round_large);
  o.large_segment = std::min(o.large_segment, fit);
  o.min_large_alloc = std::min(o.min_large_alloc, o.large_segment);
  o.small_segment = std::min(o.small_segment, std::max(fit, o.small_size));
  return o;
}

}  // namespace

namespace {
thread_local bool t_quiet = false;
}  // namespace

QuietWarnings::QuietWarnings() noexcept : previous_(t_quiet) {
  t_quiet = true;
}
QuietWarnings::~QuietWarnings() {
  t_quiet = previous_;
}

// One line per distinct warning per process, as PyTorch's TORCH_WARN_ONCE does per call site.
void detail::warn_once(const std::string& text) {
  if (t_quiet) return;
  static std::mutex mutex;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mutex);
  if (printed.insert(text).second) std::fprintf(stderr, "%s\n", text.c_str());
}

std::string detail::fallback_warning(const std::string& device, const std::string& reason,
                                     const std::string& what) {
  return "modelmem: expandable_segments is not supported on " + device + " (" + reason +
         "); falling back to " + what;
}

CachingOptions caching_options(const Config& c) {
  CachingOptions o;
  if (c.has("max_split_size_mb")) o.max_split_size = c.get_size_mb("max_split_size_mb");
  if (c.has("large_segment_size_mb")) {
    o.large_segment = c.get_size_mb("large_segment_size_mb");
    // PyTorch: requests below 10 MiB take a large segment, so it must hold them.
    o.min_large_alloc = std::min(o.min_large_alloc, o.large_segment);
  }
  o.roundup_power2_divisions = parse_roundup_power2_divisions(c.get("roundup_power2_divisions"));
  // "0" means off: an empty table, so the caching pool skips the lookup entirely.
  if (o.roundup_power2_divisions.size() == 1 && o.roundup_power2_divisions.begin()->second == 0)
    o.roundup_power2_divisions.clear();
  o.garbage_collection_threshold = c.get_double("garbage_collection_threshold");
  o.decay_ms = c.get_size("cache_decay_ms");
  o.per_process_memory_fraction = c.get_double("per_process_memory_fraction");
  o.expandable_segments = c.get_bool("expandable_segments");
  o.thread_cache_bytes = c.get_size_mb("thread_cache_mb");
  return o;
}

StaticSizing static_pool_size(const Config& c, const device::Device& dev) {
  StaticSizing s;
  if (c.has("static_pool_mb")) {
    s.bytes = c.get_size_mb("static_pool_mb");
    s.source = "static_pool_mb:" + c.get("static_pool_mb");
  } else if (c.has("model_type")) {
    const plan::FamilyPool& p = preset(c.get("model_type"));
    double factor = c.get_double("safety_factor");
    double mb = std::floor(static_cast<double>(p.pool_mib) * factor);
    s.bytes = static_cast<std::size_t>(mb) * kMiB;
    s.source = "model_type:" + c.get("model_type") + ": " + std::to_string(p.pool_mib) + " MiB x " +
               core::format_double(factor);
  } else if (c.has("plan")) {
    const std::string path = c.get("plan");
    plan::PlanSizes plan = plan::read_plan_sizes(path);
    double factor = c.get_double("safety_factor");
    double bytes = std::ceil(static_cast<double>(plan.total()) * factor);
    if (!(bytes < 1.8e19)) bad("plan", path + ": pool size overflows 64 bits");
    s.bytes = static_cast<std::size_t>(bytes);
    if (s.bytes == 0) bad("plan", path + ": arena_bytes + weights_bytes is 0, no pool to size");
    s.source = "plan:" + path + ": arena " + format_bytes(plan.arena_bytes) + " + weights " +
               format_bytes(plan.weights_bytes) + " x " + core::format_double(factor);
  } else {
    // Without a size the pool is a fraction of the device only when the fraction is given (or
    // the device is device:limited, whose capacity is): a whole host or NPU is no sensible pool.
    if (!c.has("per_process_memory_fraction") && c.get("device") != "limited")
      throw InvalidInput("config: a static pool on " + dev.name() +
                         " needs its size: static_pool_mb, plan, model_type or "
                         "per_process_memory_fraction (the whole device is no sensible default)");
    double fraction = c.get_double("per_process_memory_fraction");
    std::size_t total = dev.memory_info().total;
    s.bytes = static_cast<std::size_t>(std::floor(static_cast<double>(total) * fraction));
    // What the device can give in one piece, its padding counted.
    s.bytes = std::min(s.bytes, total - std::min(total, dev.allocation_overhead()));
    s.bytes -= s.bytes % kMiB;
    if (s.bytes == 0)
      throw InvalidInput("config: per_process_memory_fraction " + core::format_double(fraction) +
                         " of " + dev.name() + "'s " + format_bytes(total) +
                         " leaves no whole MiB for a static pool");
    s.source = "per_process_memory_fraction " + core::format_double(fraction) + " of " +
               dev.name() + " (" + format_bytes(total) + ")";
  }
  // Blocks are 256-byte aligned; a pool that is not is rounded up rather than silently shrunk.
  s.bytes = checked_align_up(s.bytes, 256, "static pool size");
  const double fraction = c.get_double("per_process_memory_fraction");
  const std::size_t total = dev.memory_info().total;
  const double cap = std::floor(static_cast<double>(total) * fraction);
  if (static_cast<double>(s.bytes) > cap)
    throw InvalidInput(
        "config: static pool of " + format_bytes_mib(s.bytes) + " (" + s.source + ") exceeds " +
        (fraction < 1.0 ? "per_process_memory_fraction " + core::format_double(fraction) + " of "
                        : std::string()) +
        dev.name() + "'s " + format_bytes(total));
  if (const std::size_t pad = dev.allocation_overhead(); s.bytes > total - std::min(total, pad))
    throw InvalidInput("config: static pool of " + format_bytes_mib(s.bytes) + " (" + s.source +
                       ") does not fit on " + dev.name() + ": its " + format_bytes(total) +
                       " hold at most " + format_bytes(total - std::min(total, pad)) +
                       " in one piece (the runtime adds " + std::to_string(pad) +
                       " bytes of padding and alignment)");
  return s;
}

namespace {

std::shared_ptr<Allocator> make_static(const device::DevicePtr& dev, const StaticSizing& size) {
  try {
    return std::make_shared<StaticAllocator>(dev, StaticOptions{size.bytes, 256});
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(e.info(), "static pool of " + format_bytes_mib(size.bytes) + " (" +
                                    size.source + ") does not fit on " + dev->name() + ": " +
                                    e.what());
  }
}

// device:npu / npu:N. With a base device (the NPU pluggable library passes the device the
// framework allocates on) the key may only agree with it.
device::DevicePtr npu_device(const std::string& key, const device::DevicePtr& base) {
  if (base) {
    if (key == "npu" || key == base->name()) return base;
    bad("device", key + " differs from the device being allocated on (" + base->name() + ")");
  }
  return device::make_acl_device(key == "npu" ? 0 : std::stoi(key.substr(4)));
}

}  // namespace

Built build(const Config& c) {
  return build(c, nullptr);
}

Built build(const Config& c, device::DevicePtr base) {
  if (c.has("pools")) return detail::build_pools(c, base);
  Built b;
  const std::string strategy = c.get("strategy");
  auto setting = [&](const std::string& key, const std::string& value) {
    b.settings.emplace_back(key, value);
  };
  setting("strategy", strategy);

  if (strategy == "system") {
    if (base) bad("strategy", "system (the C heap) cannot run on " + base->name());
    b.allocator = std::make_shared<SystemAllocator>();
    setting("device", "none (the C heap)");
    b.probe = "not run (strategy:system)";
    return b;
  }

  device::HostOptions host;
  host.huge_pages = c.get_bool("huge_pages");
  host.prefault = c.get_bool("prefault");
  if (base) {
    for (const char* k : {"huge_pages", "prefault"})
      if (c.has(k)) bad(k, "applies only to host memory (the device is " + base->name() + ")");
  }
  const std::string under = base ? base->name() : std::string("host memory");
  const std::string dev_key = c.get("device");
  if (dev_key.rfind("npu", 0) == 0) {
    b.device = npu_device(dev_key, base);
  } else {
    b.device = base ? base : device::make_host_device(host);
  }
  if (dev_key.rfind("npu", 0) == 0) {
    const device::MemoryInfo hbm = b.device->memory_info();
    setting("device", b.device->name() + " (Ascend, HBM " + format_bytes(hbm.total) + " total, " +
                          format_bytes(hbm.free) + " free)");
  } else if (c.get("device") == "limited") {
    b.device = device::make_limited_device(b.device, c.get_size_mb("device_capacity_mb"),
                                           c.get_bool("device_vmm"), 0);
    setting("device", b.device->name() + " (capacity " + c.get("device_capacity_mb") +
                          " MiB, virtual memory " + (c.get_bool("device_vmm") ? "on" : "off") +
                          ", on " + under + ")");
  } else {
    setting("device", b.device->name());
  }
  setting("huge_pages", c.get("huge_pages"));
  setting("prefault", c.get("prefault"));
  setting("per_process_memory_fraction", c.get("per_process_memory_fraction"));

  if (strategy == "static") {
    StaticSizing size = static_pool_size(c, *b.device);
    setting("static_pool", format_bytes_mib(size.bytes) + " (" + size.source + ")");
    b.probe = "not run (strategy:static)";
    b.allocator = make_static(b.device, size);
    return b;
  }

  if (strategy == "planned") {
    PlannedOptions o;
    o.device = b.device;
    if (c.get("planned_fallback") == "caching")
      o.fallback =
          std::make_shared<CachingAllocator>(b.device, fit_segments(caching_options(c), *b.device));
    else
      o.fallback = std::make_shared<DirectAllocator>(b.device);
    o.auto_steps = c.get("planned_steps") == "auto";
    o.warmup_steps = c.get_size("planned_warmup_steps");
    o.mismatch_limit = c.get_size("planned_mismatch_limit");
    o.max_plans = c.get_size("planned_max_plans");
    o.solver = c.get("planned_solver");
    o.solve_time_limit = std::chrono::milliseconds(c.get_size("planned_solve_ms"));
    o.defer_plans = c.get_bool("planned_defer");
    o.min_size = checked_mul(c.get_size("planned_min_kb"), 1024, "planned_min_kb");
    o.huge_pages = c.get_bool("planned_huge_pages");
    for (const char* k : {"planned_steps", "planned_warmup_steps", "planned_mismatch_limit",
                          "planned_max_plans", "planned_solver", "planned_solve_ms",
                          "planned_defer", "planned_min_kb", "planned_huge_pages"})
      setting(k, c.get(k));
    b.probe = "not run (strategy:planned)";
    b.allocator = std::make_shared<PlannedAllocator>(std::move(o));
    return b;
  }

  // strategy == "caching"
  CachingOptions options = fit_segments(caching_options(c), *b.device);
  auto caching_settings = [&](const CachingOptions& o) {
    setting("max_split_size_mb",
            c.has("max_split_size_mb") ? c.get("max_split_size_mb") : "unlimited");
    setting("roundup_power2_divisions", c.get("roundup_power2_divisions"));
    setting("garbage_collection_threshold", c.get("garbage_collection_threshold"));
    setting("cache_decay_ms", c.get("cache_decay_ms"));
    setting("expandable_segments", o.expandable_segments ? "True" : "False");
    setting("thread_cache_mb", c.get("thread_cache_mb"));
  };
  if (!options.expandable_segments) {
    caching_settings(options);
    b.probe = "not run (expandable_segments:False)";
    b.allocator = std::make_shared<CachingAllocator>(b.device, options);
    return b;
  }

  device::VmProbe probe = b.device->probe_virtual_memory();
  if (probe.supported) {
    b.probe = b.device->name() + ": virtual memory supported";
    caching_settings(options);
    setting("fallback", c.get("fallback") + " (not needed)");
    b.allocator = std::make_shared<CachingAllocator>(b.device, options);
    return b;
  }
  const std::string reason = probe.reason.empty() ? "no reason given" : probe.reason;
  b.probe = b.device->name() + ": virtual memory not supported (" + reason + ")";
  const std::string fallback = c.get("fallback");
  if (fallback == "error")
    throw Unsupported("expandable_segments is not supported on " + b.device->name() + " (" +
                      reason + "); fallback:error forbids building anything else");
  std::string warning;
  if (fallback == "static") {
    StaticSizing size = static_pool_size(c, *b.device);
    warning = detail::fallback_warning(b.device->name(), reason,
                                       "a static pool of " + format_bytes_mib(size.bytes));
    setting("expandable_segments", "True (unsupported here)");
    setting("fallback",
            "static: pool of " + format_bytes_mib(size.bytes) + " (" + size.source + ")");
    b.allocator = make_static(b.device, size);
  } else {
    options.expandable_segments = false;
    warning = detail::fallback_warning(b.device->name(), reason,
                                       "the caching pool with fixed-size segments");
    caching_settings(options);
    setting("fallback", "caching (fixed-size segments)");
    b.allocator = std::make_shared<CachingAllocator>(b.device, options);
  }
  detail::warn_once(warning);
  b.allocator->add_warning(warning);
  b.fallback_warning = warning;
  return b;
}

Built build_from_env() {
  const char* env = std::getenv("MODELMEM_ALLOC_CONF");
  return build(parse_config(env ? env : ""));
}

std::string Built::setting(const std::string& key) const {
  for (const auto& [k, v] : settings)
    if (k == key) return v;
  return "";
}

std::string for_replay(std::string_view text) {
  const Config c = parse_config(text);
  std::string out(core::trim(text));
  auto add = [&](const char* key, const char* value) {
    if (c.has(key)) return;
    out += out.empty() ? "" : ",";
    out += key;
    out += ':';
    out += value;
  };
  const std::string strategy = c.get("strategy");
  if (strategy == "planned") add("planned_defer", "False");
  if (strategy == "caching" || (strategy == "planned" && c.get("planned_fallback") == "caching"))
    add("cache_decay_ms", "0");
  return out;
}

}  // namespace modelmem::config
