// The factory's part for per-model pools (pools:[NAME:MiB,...], default_pool:NAME): one stack of
// the configured strategy per pool, on its own capacity-limited view of the device (the view
// holds exactly the quota, so a pool can never take memory from another) behind a QuotaAdaptor,
// and a PoolRouter in front that sends each thread's requests to the pool it selected.
#include <string>

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
  if (name.empty() || name.size() > 47) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
    if (!ok) return false;
  }
  return true;
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
      throw InvalidInput("'" + std::string(name) +
                         "' is not a pool name (1 to 47 of A-Z a-z 0-9 _ - .)");
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
Config for_pool(const Config& c, std::size_t quota) {
  Config out = without_pools(c);
  for (const char* k : {"device", "device_capacity_mb", "device_vmm", "huge_pages", "prefault",
                        "static_pool_mb", "plan", "model_type", "safety_factor"})
    std::erase_if(out.explicit_keys, [&](const std::string& e) { return e == k; });
  out.values["device"] = "host";
  // A static pool (strategy:static, or the static fallback of expandable segments) is the
  // whole quota.
  const std::string strategy = out.get("strategy");
  if (strategy == "static" || (strategy == "caching" && out.get_bool("expandable_segments") &&
                               out.get("fallback") == "static")) {
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
  std::vector<alloc::NamedPool> pools;
  std::string list;
  int index = 1;
  for (const auto& q : quotas) {
    auto view = device::make_limited_device(b.device, q.bytes, false, index++);
    Built inner = build(for_pool(c, q.bytes), view);
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
  b.pools = pools;
  b.allocator = router;
  return b;
}

}  // namespace detail
}  // namespace modelmem::config
