// The router keeps one map entry per live block (pointer -> pool, with the size and stream its
// free event reports) so a free finds its pool whichever thread made the block; the pools
// themselves do the work, outside the router's lock.
#include "modelmem/alloc/pool_router.hpp"

#include <algorithm>
#include <set>

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

}  // namespace

PoolRouter::PoolRouter(std::shared_ptr<Allocator> main, std::vector<NamedPool> pools,
                       std::string default_pool)
    : main_(std::move(main)), pools_(std::move(pools)) {
  if (pools_.empty()) throw InvalidInput("pools: no pool given");
  std::set<std::string> names;
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    if (!pools_[i].allocator)
      throw InvalidInput("pools: pool " + pools_[i].name + " has no allocator");
    if (!names.insert(pools_[i].name).second)
      throw InvalidInput("pools: pool " + pools_[i].name + " is named twice");
    if (pools_[i].name == default_pool) default_index_ = static_cast<int>(i);
  }
  if (!default_pool.empty() && default_index_ < 0)
    throw InvalidInput("pools: default pool " + default_pool + " is not one of the pools");
  if (!main_ && default_index_ < 0)
    throw InvalidInput("pools: neither a main stack nor a default pool");
}

PoolRouter::~PoolRouter() = default;

int PoolRouter::current_index() const noexcept {
  if (t_pool_depth > 0) {
    const int i = t_pool_stack[t_pool_depth - 1];
    if (i >= 0 && static_cast<std::size_t>(i) < pools_.size()) return i;
  }
  return default_index_;
}

Allocator& PoolRouter::target(int index) const {
  return index < 0 ? *main_ : *pools_[static_cast<std::size_t>(index)].allocator;
}

void* PoolRouter::allocate(std::size_t size, Stream stream) {
  const int index = current_index();
  void* p = nullptr;
  try {
    p = target(index).allocate(size, stream);
  } catch (const QuotaExceeded&) {
    throw;
  } catch (const OutOfMemory& e) {
    if (index < 0) throw;
    // The pool's device view is its quota: running out of it is running out of the quota.
    const NamedPool& pool = pools_[static_cast<std::size_t>(index)];
    throw QuotaExceeded(e.info(), "pool '" + pool.name + "' is out of its quota of " +
                                      format_bytes(pool.quota) + ": " + e.what());
  }
  try {
    std::lock_guard lock(mutex_);
    owner_.emplace(p, Owner{index, size, stream});
  } catch (...) {
    target(index).deallocate(p);
    throw;
  }
  emit(EventKind::kAlloc, reinterpret_cast<std::uintptr_t>(p), size, stream,
       static_cast<std::uint32_t>(index + 1));
  return p;
}

void PoolRouter::deallocate(void* ptr) {
  Owner owner{};
  {
    std::lock_guard lock(mutex_);
    auto it = owner_.find(ptr);
    if (it == owner_.end())
      throw InvalidInput("pools: free of a pointer no pool handed out (or freed twice)");
    owner = it->second;
    owner_.erase(it);
  }
  const int index = owner.index;
  try {
    target(index).deallocate(ptr);
  } catch (...) {
    std::lock_guard lock(mutex_);
    owner_.emplace(ptr, owner);
    throw;
  }
  emit(EventKind::kFree, reinterpret_cast<std::uintptr_t>(ptr), owner.size, owner.stream,
       static_cast<std::uint32_t>(index + 1));
}

Stats PoolRouter::stats() const {
  Stats s = main_ ? main_->stats() : Stats{};
  for (const auto& p : pools_) s.merge(p.allocator->stats());
  return with_warnings(s);
}

void PoolRouter::reset_peak() {
  if (main_) main_->reset_peak();
  for (const auto& p : pools_) p.allocator->reset_peak();
}

void PoolRouter::trim() {
  if (main_) main_->trim();
  for (const auto& p : pools_) p.allocator->trim();
}

std::string PoolRouter::describe() const {
  std::string s = "pools(";
  for (std::size_t i = 0; i < pools_.size(); ++i)
    s += (i ? ", " : "") + pools_[i].name + "=" + format_bytes(pools_[i].quota);
  s += default_index_ >= 0 ? "; default " + pools_[static_cast<std::size_t>(default_index_)].name
                           : std::string("; default the main stack");
  s += ")";
  if (main_) s += "; main stack " + main_->describe();
  return s;
}

void PoolRouter::begin_step() {
  emit_mark("step_begin");
  target(current_index()).begin_step();
}

void PoolRouter::end_step() {
  emit_mark("step_end");
  target(current_index()).end_step();
}

void PoolRouter::push_pool(std::string_view name) {
  int index = -1;
  for (std::size_t i = 0; i < pools_.size(); ++i)
    if (pools_[i].name == name) index = static_cast<int>(i);
  if (index < 0) {
    std::string known;
    for (const auto& p : pools_) known += (known.empty() ? "" : ", ") + p.name;
    throw InvalidInput("pools: no pool named '" + std::string(name) + "' (pools: " + known + ")");
  }
  if (t_pool_depth >= kMaxDepth)
    throw InvalidInput("pools: pool selections nested more than 16 deep");
  t_pool_stack[t_pool_depth++] = index;
}

bool PoolRouter::pop_pool() noexcept {
  if (t_pool_depth == 0) return false;
  --t_pool_depth;
  return true;
}

std::string PoolRouter::current_pool() const {
  const int i = current_index();
  return i < 0 ? std::string() : pools_[static_cast<std::size_t>(i)].name;
}

}  // namespace modelmem::alloc
