// The router keeps one map entry per live block (pointer -> pool) so a free finds its pool
// whichever thread made the block; the pools themselves do the work, outside the router's lock.
#include "modelmem/alloc/pool_router.hpp"

#include <set>

#include "invariant_probe.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc {
namespace {

constexpr int kMaxDepth = 16;

// The selection stack of this thread: pool indices, innermost last. The default TLS model, not
// initial-exec: the core is linked into libraries that frameworks dlopen (the CUDA and NPU
// pluggable allocators), where initial-exec TLS needs static TLS space the loader may not have
// ("cannot allocate memory in static TLS block"). Under LD_PRELOAD the library is loaded at
// start-up, so this TLS is in the static block anyway and reading it never allocates.
__thread int t_pool_stack[kMaxDepth];
__thread int t_pool_depth = 0;

// The pool this thread's requests to a router with these pools go to: its innermost valid
// selection, else the default pool; -1 = the main stack.
int current_index(std::span<const NamedPool> pools) noexcept {
  if (t_pool_depth > 0) {
    const int i = t_pool_stack[t_pool_depth - 1];
    if (i >= 0 && static_cast<std::size_t>(i) < pools.size()) return i;
  }
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (pools[i].is_default) return static_cast<int>(i);
  return -1;
}

}  // namespace

void push_pool(const Allocator& router, std::string_view name) {
  const std::span<const NamedPool> pools = router.pools();
  int index = -1;
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (pools[i].name == name) index = static_cast<int>(i);
  if (index < 0) {
    std::string known;
    for (const auto& p : pools) known += (known.empty() ? "" : ", ") + p.name;
    throw InvalidInput("pools: no pool named '" + std::string(name) +
                       "' (pools: " + (known.empty() ? std::string("none") : known) + ")");
  }
  if (t_pool_depth >= kMaxDepth)
    throw InvalidInput("pools: pool selections nested more than 16 deep");
  t_pool_stack[t_pool_depth++] = index;
}

bool pop_pool() noexcept {
  if (t_pool_depth == 0) return false;
  --t_pool_depth;
  return true;
}

std::string current_pool(const Allocator& router) {
  const std::span<const NamedPool> pools = router.pools();
  const int i = current_index(pools);
  return i < 0 ? std::string() : pools[static_cast<std::size_t>(i)].name;
}

std::uint32_t current_pool_id(const Allocator& router) noexcept {
  return static_cast<std::uint32_t>(current_index(router.pools()) + 1);
}

PoolRouter::PoolRouter(std::shared_ptr<Allocator> main, std::vector<NamedPool> pools,
                       std::string default_pool)
    : main_(std::move(main)), pools_(std::move(pools)) {
  if (pools_.empty()) throw InvalidInput("pools: no pool given");
  std::set<std::string> names;
  bool has_default = false;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    if (!pools_[i].allocator)
      throw InvalidInput("pools: pool " + pools_[i].name + " has no allocator");
    if (!names.insert(pools_[i].name).second)
      throw InvalidInput("pools: pool " + pools_[i].name + " is named twice");
    pools_[i].is_default = !default_pool.empty() && pools_[i].name == default_pool;
    has_default = has_default || pools_[i].is_default;
    relays_.push_back(
        std::make_unique<PoolRelay>(&listener_copy_, static_cast<std::uint32_t>(i + 1)));
  }
  if (!default_pool.empty() && !has_default)
    throw InvalidInput("pools: default pool " + default_pool + " is not one of the pools");
  if (!main_ && !has_default) throw InvalidInput("pools: neither a main stack nor a default pool");
}

PoolRouter::~PoolRouter() {
  // The pools may outlive the router (shared): they must not keep its relays.
  if (listener_copy_.load() != nullptr)
    for (auto& p : pools_) p.allocator->set_listener(nullptr);
}

Allocator& PoolRouter::target(int index) const {
  return index < 0 ? *main_ : *pools_[static_cast<std::size_t>(index)].allocator;
}

void* PoolRouter::do_allocate(std::size_t size, Stream stream) {
  const int index = current_index(pools_);
  void* p = nullptr;
  try {
    p = target(index).allocate(size, stream);
  } catch (const QuotaExceeded&) {
    throw;
  } catch (const OutOfMemory& e) {
    if (index < 0) throw;
    // The pool's device view is its quota: running out of it is running out of the quota.
    const NamedPool& pool = pools_[static_cast<std::size_t>(index)];
    OomInfo info = e.info();
    info.quota = pool.quota;
    // The quota that serves this request as the pool stands: what it holds plus what the
    // request needed from the device, in whole MiB.
    const std::size_t needed = info.needed > 0 ? info.needed : info.requested;
    const std::size_t mib = std::size_t{1} << 20;
    const std::size_t quota_mib = (info.reserved + needed + mib - 1) / mib;
    throw QuotaExceeded(
        info, "pool '" + pool.name + "' is out of its quota of " + format_bytes(pool.quota) + ": " +
                  e.what() + "; to change: pools:[" + pool.name + ":" + std::to_string(quota_mib) +
                  ",...] serves this request (or a smaller batch in this pool)");
  }
  try {
    std::lock_guard lock(mutex_);
    owner_.emplace(p, index);
  } catch (...) {
    target(index).deallocate(p);
    throw;
  }
  return p;
}

void PoolRouter::do_deallocate(void* ptr) {
  int index = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = owner_.find(ptr);
    if (it == owner_.end())
      throw InvalidInput("pools: free of a pointer no pool handed out (or freed twice)");
    index = it->second;
    owner_.erase(it);
  }
  try {
    target(index).deallocate(ptr);
  } catch (...) {
    std::lock_guard lock(mutex_);
    owner_.emplace(ptr, index);
    throw;
  }
}

LiveBlock PoolRouter::do_block(const void* ptr) const {
  int index = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = owner_.find(ptr);
    if (it == owner_.end()) return {};
    index = it->second;
  }
  LiveBlock b = target(index).block(ptr);
  b.pool = static_cast<std::uint32_t>(index + 1);
  return b;
}

Stats PoolRouter::do_stats() const {
  Stats s = main_ ? main_->stats() : Stats{};
  for (const auto& p : pools_) s.merge(p.allocator->stats());
  return s;
}

void PoolRouter::do_reset_peak() {
  if (main_) main_->reset_peak();
  for (const auto& p : pools_) p.allocator->reset_peak();
}

void PoolRouter::do_trim() {
  if (main_) main_->trim();
  for (const auto& p : pools_) p.allocator->trim();
}

std::string PoolRouter::do_describe() const {
  std::string s = "pools(";
  std::string default_name;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    s += (i ? ", " : "") + pools_[i].name + "=" + format_bytes(pools_[i].quota);
    if (pools_[i].is_default) default_name = pools_[i].name;
  }
  s +=
      !default_name.empty() ? "; default " + default_name : std::string("; default the main stack");
  s += ")";
  if (main_) s += "; main stack " + main_->describe();
  return s;
}

void PoolRouter::do_begin_step() {
  target(current_index(pools_)).begin_step();
}

void PoolRouter::do_end_step() {
  target(current_index(pools_)).end_step();
}

void PoolRouter::do_set_listener(Listener* listener) noexcept {
  listener_copy_.store(listener, std::memory_order_release);
  if (main_) attach_upstream(*main_, listener);
  for (std::size_t i = 0; i < pools_.size(); ++i)
    attach_upstream(*pools_[i].allocator, listener ? relays_[i].get() : nullptr);
}

// Every block the router knows is live in the pool it names; then each pool's own invariants.
std::string PoolRouter::do_check_invariants() const {
  {
    std::lock_guard lock(mutex_);
    for (const auto& [ptr, index] : owner_) {
      if (index >= static_cast<int>(pools_.size()) || (index < 0 && !main_))
        return "pools: a block is owned by pool index " + std::to_string(index);
    }
  }
  if (main_)
    if (std::string v = main_->check_invariants(); !v.empty()) return v;
  for (const auto& p : pools_)
    if (std::string v = p.allocator->check_invariants(); !v.empty())
      return "pool '" + p.name + "': " + v;
  return {};
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(PoolRouter& a, std::int64_t delta) {
  static const char stray = 0;
  std::lock_guard lock(a.mutex_);
  if (delta > 0)
    a.owner_[&stray] = static_cast<int>(a.pools_.size());
  else
    a.owner_.erase(&stray);
}

std::size_t PoolRouter::do_invariant_size() const {
  std::lock_guard lock(mutex_);
  return owner_.size();
}

}  // namespace modelmem::alloc
