// The factory's part for per-model pools (pools:[NAME:MiB,...], default_pool:NAME): one stack of
// the configured strategy per pool, on its own capacity-limited view of the device (the view
// holds exactly the quota, so a pool can never take memory from another) behind a QuotaAdaptor,
// and a PoolRouter in front that sends each thread's requests to the pool it selected.
#include <string>
#include <vector>

#include "config/internal.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::config {
namespace {

using core::trim;
using detail::kMaxMb;
using detail::kMiB;

}  // namespace

bool valid_pool_name(std::string_view name) {
  return core::valid_pool_name(name);
}

std::vector<PoolQuota> parse_pools(std::string_view text) {
  text = trim(text);
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    throw InvalidInput("expected [NAME:MiB,...], got '" + std::string(text) + "'");
  std::string_view body = text.substr(1, text.size() - 2);
  std::vector<PoolQuota> out;
  for (const detail::ListEntry& entry : detail::list_entries(body, "entry", "NAME:MiB")) {
    const std::string_view name = entry.key;
    const std::string_view mb_text = entry.value;
    if (!valid_pool_name(name))
      throw InvalidInput("'" + std::string(name) + "' is not a pool name (" +
                         core::pool_name_rule() + ")");
    std::size_t mb = 0;
    if (!detail::parse_uint(mb_text, mb) || mb == 0 || mb > kMaxMb)
      throw InvalidInput("pool " + std::string(name) + ": quota '" + std::string(mb_text) +
                         "' is not a whole number of MiB > 0");
    for (const auto& p : out)
      if (p.name == name) throw InvalidInput("pool " + std::string(name) + " is named twice");
    out.push_back(PoolQuota{std::string(name), mb * kMiB});
  }
  return out;
}

namespace detail {
namespace {

// `c` without the pool keys: what each pool and the main stack are built from.
Config without_pools(const Config& c) {
  Config out = c;
  std::erase_if(out.explicit_keys,
                [](const std::string& k) { return k == "pools" || k == "default_pool"; });
  out.values["pools"] = "";
  out.values["default_pool"] = "";
  return out;
}

// The pool's own configuration: the same strategy and keys, on a device that is already made.
// `no_vm`: expandable segments were asked for and the device has no virtual memory, so the pool
// is what the fallback builds (the one warning is given for the whole stack).
Config for_pool(const Config& c, std::size_t quota, bool no_vm) {
  Config out = without_pools(c);
  const std::string strategy = out.get("strategy");
  const bool expandable = strategy == "caching" && out.get_bool("expandable_segments");
  const bool whole = strategy == "static" || (expandable && out.get("fallback") == "static");
  std::vector<const char*> drop = {"device",     "device_capacity_mb", "device_vmm",
                                   "huge_pages", "prefault",           "static_pool_mb",
                                   "plan",       "model_type",         "safety_factor"};
  if (no_vm && expandable) {
    drop.insert(drop.end(), {"expandable_segments", "fallback"});
    out.values["expandable_segments"] = "False";
    if (whole) {
      drop.insert(drop.end(),
                  {"max_split_size_mb", "large_segment_size_mb", "roundup_power2_divisions",
                   "garbage_collection_threshold", "cache_decay_ms", "thread_cache_mb"});
      out.values["strategy"] = "static";
    }
  }
  for (const char* k : drop)
    std::erase_if(out.explicit_keys, [&](const std::string& e) { return e == k; });
  out.values["device"] = "host";
  // A static pool (strategy:static, or the static fallback of expandable segments) is the
  // whole quota.
  if (whole) {
    out.values["static_pool_mb"] = std::to_string(quota / kMiB);
    out.explicit_keys.push_back("static_pool_mb");
  }
  return out;
}

}  // namespace

Built build_pools(const Config& c, device::DevicePtr base) {
  const std::vector<PoolQuota> quotas = parse_pools(c.get("pools"));
  const std::string default_pool = c.get("default_pool");
  Built b;
  std::shared_ptr<alloc::Allocator> main;
  if (default_pool.empty()) {
    Built m = build(without_pools(c), base);
    main = m.allocator;
    b = std::move(m);
  } else {
    // No main stack: only its device is needed.
    device::HostOptions host;
    host.huge_pages = c.get_bool("huge_pages");
    host.prefault = c.get_bool("prefault");
    if (base)
      for (const char* k : {"huge_pages", "prefault"})
        if (c.has(k)) bad(k, "applies only to host memory (the device is " + base->name() + ")");
    b.device = base ? base : device::make_host_device(host);
    if (c.get("device") == "limited")
      b.device = device::make_limited_device(b.device, c.get_size_mb("device_capacity_mb"),
                                             c.get_bool("device_vmm"), 0);
    b.settings.emplace_back("strategy", c.get("strategy"));
    b.settings.emplace_back("device", b.device->name());
    b.probe = "not run (every request goes to a pool)";
  }
  // The quotas, and a static main pool, must fit the device together.
  const std::size_t total = b.device->memory_info().total;
  std::size_t sum = main ? static_cast<std::size_t>(main->stats().reserved_bytes.all.current) : 0;
  for (const auto& q : quotas) sum = checked_add(sum, q.bytes, "pools: sum of quotas");
  if (sum > total)
    bad("pools", "the quotas" + std::string(main && sum != 0 ? " and the main stack's pool" : "") +
                     " add up to " + format_bytes(sum) + ", more than " + b.device->name() + "'s " +
                     format_bytes(total));
  // Expandable segments in a pool map pages of the device's virtual memory through its view;
  // without it, every pool is what the fallback builds, under the stack's one warning.
  const bool expandable = c.get("strategy") == "caching" && c.get_bool("expandable_segments");
  const device::VmProbe vm = expandable ? b.device->probe_virtual_memory() : device::VmProbe{};
  const bool no_vm = expandable && !vm.supported;
  std::string warning;
  if (no_vm && !main) {
    const std::string reason = vm.reason.empty() ? "no reason given" : vm.reason;
    const std::string fallback = c.get("fallback");
    if (fallback == "error")
      throw Unsupported("expandable_segments is not supported on " + b.device->name() + " (" +
                        reason + "); fallback:error forbids building anything else");
    warning = fallback_warning(b.device->name(), reason,
                               fallback == "static"
                                   ? "a static pool of its quota in each pool"
                                   : "the caching pool with fixed-size segments in each pool");
    warn_once(warning);
    b.fallback_warning = warning;
    b.probe = b.device->name() + ": virtual memory not supported (" + reason + ")";
  }
  std::vector<alloc::NamedPool> pools;
  std::string list;
  int index = 1;
  for (const auto& q : quotas) {
    auto view = device::make_limited_device(b.device, q.bytes, expandable && vm.supported, index++);
    Built inner = build(for_pool(c, q.bytes, no_vm), view);
    alloc::QuotaOptions qo;
    qo.name = q.name;
    qo.quota = q.bytes;
    qo.device = view;
    auto limited = std::make_shared<alloc::QuotaAdaptor>(inner.allocator, qo);
    pools.push_back(alloc::NamedPool{q.name, q.bytes, limited});
    list += (list.empty() ? "" : ", ") + q.name + " " + format_bytes(q.bytes) + " (" +
            c.get("strategy") + " on " + view->name() + ")";
  }
  b.settings.emplace_back("pools", list);
  b.settings.emplace_back("default_pool",
                          default_pool.empty() ? "none (the main stack, no quota)" : default_pool);
  auto router = std::make_shared<alloc::PoolRouter>(main, pools, default_pool);
  if (!warning.empty()) router->add_warning(warning);
  b.pools = pools;
  b.allocator = router;
  return b;
}

}  // namespace detail
}  // namespace modelmem::config
