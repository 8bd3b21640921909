// The caching pool's thread caches: a thread cache parks blocks its owner thread frees and
// hands them back to the same thread for the same (rounded size, stream) without the pool's
// lock (the protocol is described at ThreadCache in impl.hpp), and the pool's entry points
// allocate/deallocate, which try the cache first. Everything that touches the thread-local records
// lives in this file, so the hit path reads them directly.
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "alloc/caching/impl.hpp"

#if defined(__linux__) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MODELMEM_HAVE_MEMBARRIER 1
#endif

namespace modelmem::alloc {
namespace caching {

std::atomic<std::uint64_t> g_next_pool_id{1};

namespace {

struct CacheRef {
  std::uint64_t pool_id;
  std::shared_ptr<ThreadCache> cache;
  std::shared_ptr<std::atomic<bool>> pool_alive;
};

thread_local std::uint64_t t_last_pool = 0;
thread_local ThreadCache* t_last_cache = nullptr;
thread_local bool t_exiting = false;

// The thread's caches, one per pool it used. At thread exit each is marked orphaned (a later
// thread adopts it, so thread churn does not grow the pool's list).
struct ThreadCaches {
  std::vector<CacheRef> refs;
  ~ThreadCaches();
};
thread_local ThreadCaches t_caches;

ThreadCaches::~ThreadCaches() {
  t_exiting = true;
  t_last_pool = 0;
  t_last_cache = nullptr;
  for (CacheRef& r : refs) r.cache->orphaned.store(true, std::memory_order_release);
}

}  // namespace

#ifdef MODELMEM_HAVE_MEMBARRIER
namespace {
long membarrier_call(int cmd) {
  return syscall(SYS_membarrier, cmd, 0, 0);
}
}  // namespace
bool membarrier_available() {
  static const bool ok = [] {
    const long q = membarrier_call(MEMBARRIER_CMD_QUERY);
    if (q < 0 || (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return ok;
}
namespace {
// A full memory barrier on every running thread of the process.
void fence_all_threads() {
  if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // A forked child has to register again.
  if (membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  if (membarrier_call(MEMBARRIER_CMD_GLOBAL) == 0) return;
  std::fputs("modelmem: membarrier failed after it was available; cannot continue safely\n",
             stderr);
  std::abort();
}
}  // namespace
#else
bool membarrier_available() {
  return false;
}
namespace {
void fence_all_threads() {}
}  // namespace
#endif

}  // namespace caching

[[gnu::always_inline]] inline ThreadCache* CachingAllocator::Impl::current_cache() const noexcept {
  if (t_last_pool == id_) [[likely]]
    return t_last_cache;
  return find_cache();
}

[[gnu::noinline]] ThreadCache* CachingAllocator::Impl::find_cache() const noexcept {
  if (t_exiting) return nullptr;
  for (const CacheRef& r : t_caches.refs)
    if (r.pool_id == id_) {
      t_last_pool = id_;
      t_last_cache = r.cache.get();
      return t_last_cache;
    }
  return nullptr;
}

// This thread's cache, adopted from an exited thread or made. Under mu_.
ThreadCache* CachingAllocator::Impl::own_cache_locked() noexcept {
  if (ThreadCache* c = current_cache()) return c;
  if (t_exiting) return nullptr;
  try {
    std::shared_ptr<ThreadCache> cache;
    for (auto& c : caches_)
      if (c->orphaned.load(std::memory_order_acquire)) {
        cache = c;
        break;
      }
    if (!cache) {
      cache = std::make_shared<ThreadCache>();
      caches_.push_back(cache);
    }
    auto& refs = t_caches.refs;
    std::erase_if(refs,
                  [](const CacheRef& r) { return !r.pool_alive->load(std::memory_order_acquire); });
    refs.push_back(CacheRef{id_, cache, alive_});
    cache->orphaned.store(false, std::memory_order_relaxed);
    t_last_pool = id_;
    t_last_cache = cache.get();
    return cache.get();
  } catch (const std::bad_alloc&) {
    return nullptr;  // no cache for this thread: everything goes through the lock
  }
}

[[gnu::always_inline]] inline bool CachingAllocator::Impl::enter(ThreadCache& c) const noexcept {
  if (tc_fence_) {
    c.busy.store(1, std::memory_order_relaxed);
    // The claimer's membarrier orders this store before the load on the CPU.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (c.claimed.load(std::memory_order_acquire) == 0) return true;
    c.busy.store(0, std::memory_order_release);
    return false;
  }
  int expected = 0;
  return c.busy.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                        std::memory_order_relaxed);
}

void CachingAllocator::Impl::leave(ThreadCache& c) noexcept {
  c.busy.store(0, std::memory_order_release);
}

// Exclusive access for a thread holding mu_ (waits for the owner to leave an operation).
void CachingAllocator::Impl::claim(std::span<const std::shared_ptr<ThreadCache>> caches) const {
  if (caches.empty()) return;
  if (tc_fence_) {
    for (const auto& c : caches) c->claimed.store(1, std::memory_order_relaxed);
    fence_all_threads();
    for (const auto& c : caches)
      while (c->busy.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    return;
  }
  for (const auto& c : caches) {
    int expected = 0;
    while (!c->busy.compare_exchange_weak(expected, 2, std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
      expected = 0;
      std::this_thread::yield();
    }
  }
}

void CachingAllocator::Impl::unclaim(
    std::span<const std::shared_ptr<ThreadCache>> caches) const noexcept {
  for (const auto& c : caches) {
    if (tc_fence_)
      c->claimed.store(0, std::memory_order_release);
    else
      c->busy.store(0, std::memory_order_release);
  }
}

std::shared_ptr<ThreadCache> CachingAllocator::Impl::shared_of(ThreadCache* c) const {
  for (const auto& p : caches_)
    if (p.get() == c) return p;
  return nullptr;
}

// A cache hit: a block this thread parked for the same (rounded size, stream).
[[gnu::always_inline]] inline void* CachingAllocator::Impl::cached_allocate(std::size_t size,
                                                                            Stream stream) {
  if (size - 1 >= tc_max_request_) return nullptr;  // also size 0
  ThreadCache* c = current_cache();
  if (c == nullptr) return nullptr;
  const std::size_t rounded = plain_rounding_
                                  ? (size + options_.round_bytes - 1) & ~(options_.round_bytes - 1)
                                  : round_size(size);
  if (!enter(*c)) return nullptr;
  std::uintptr_t addr = 0;
  ThreadCache::Bin* bin = c->bin(rounded, stream, false);
  if (bin != nullptr && bin->n > 0) {
    Block* b = bin->slot[--bin->n];
    bin->slot[bin->n] = nullptr;
    c->parked_bytes -= b->size;
    b->requested = size;
    b->tc_state.store(kTcLive, std::memory_order_relaxed);
    c->remember(b);
    addr = b->addr;
    bump(c->hits_b, static_cast<std::int64_t>(b->size));
    bump(c->hits_r, static_cast<std::int64_t>(size));
    bump(c->hits_n, 1);
  }
  leave(*c);
  if (addr == 0) return nullptr;
  return reinterpret_cast<void*>(addr);
}

// Parks a block this thread's cache handed out (or the pool handed to this thread), if the
// cache has room; false = take the locked path.
[[gnu::always_inline]] inline bool CachingAllocator::Impl::cached_deallocate(void* ptr) {
  ThreadCache* c = current_cache();
  if (c == nullptr) return false;
  if (!enter(*c)) return false;
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  ThreadCache::Entry& e = c->table[ThreadCache::slot_of(p)];
  std::size_t bytes = 0;
  if (e.ptr == p) {
    Block* b = e.block;
    ThreadCache::Bin* bin = c->parked_bytes + b->size <= options_.thread_cache_bytes
                                ? c->bin(b->size, b->stream, true)
                                : nullptr;
    if (bin != nullptr && bin->n < kSlotsPerBin) {
      e = ThreadCache::Entry{};
      b->tc_state.store(kTcParked, std::memory_order_relaxed);
      bin->slot[bin->n++] = b;
      c->parked_bytes += b->size;
      bytes = b->size;
      bump(c->parks_b, static_cast<std::int64_t>(b->size));
      bump(c->parks_r, static_cast<std::int64_t>(b->requested));
      bump(c->parks_n, 1);
    }
  }
  leave(*c);
  return bytes != 0;
}

// Under mu_: a block a thread cache knows becomes the pool's alone. False when it is parked,
// i.e. already freed.
bool CachingAllocator::Impl::detach(Block* b) {
  if (b->tc_state.load(std::memory_order_relaxed) == kTcNone) return true;
  ThreadCache* o = b->tc_owner;
  std::shared_ptr<ThreadCache> foreign;
  if (o != current_cache()) foreign = shared_of(o);
  if (foreign) claim({&foreign, 1});
  const bool live = b->tc_state.load(std::memory_order_relaxed) == kTcLive;
  if (live) {
    o->forget(b->addr);
    b->tc_state.store(kTcNone, std::memory_order_relaxed);
    b->tc_owner = nullptr;
  }
  if (foreign) unclaim({&foreign, 1});
  return live;
}

// Under mu_: every parked block goes back to the pool. Returns the number of blocks.
std::size_t CachingAllocator::Impl::flush_thread_caches() {
  if (caches_.empty()) return 0;
  claim(caches_);
  std::size_t n = 0;
  for (const auto& c : caches_) {
    for (ThreadCache::Bin& bin : c->bins) {
      for (int i = 0; i < bin.n; ++i) {
        Block* b = bin.slot[i];
        bin.slot[i] = nullptr;
        b->tc_state.store(kTcNone, std::memory_order_relaxed);
        b->tc_owner = nullptr;
        const bool small = b->small_request;
        const auto bytes = static_cast<std::int64_t>(b->size);
        const auto req = static_cast<std::int64_t>(b->requested_counted);
        // The caller's free was counted when the block was parked.
        uncount(stats_.allocated_bytes, small, bytes);
        uncount(stats_.requested_bytes, small, req);
        uncount(stats_.allocation, small, 1);
        uncount(stats_.active_bytes, small, bytes);
        uncount(stats_.active, small, 1);
        steal_b_ += bytes;
        steal_r_ += req;
        ++steal_n_;
        active_.erase(b->addr);
        return_block(b, false);
        ++n;
      }
      bin.n = 0;
    }
    c->parked_bytes = 0;
  }
  unclaim(caches_);
  return n;
}

// The pool's counters count parked blocks as allocated; what callers hold is less.
void CachingAllocator::Impl::apply_thread_caches(Stats& s) const {
  std::int64_t pb = 0, pr = 0, pn = 0, hb = 0, hr = 0, hn = 0;
  for (const auto& c : caches_) {
    pb += c->parks_b.load(std::memory_order_relaxed);
    pr += c->parks_r.load(std::memory_order_relaxed);
    pn += c->parks_n.load(std::memory_order_relaxed);
    hb += c->hits_b.load(std::memory_order_relaxed);
    hr += c->hits_r.load(std::memory_order_relaxed);
    hn += c->hits_n.load(std::memory_order_relaxed);
  }
  auto adjust = [](CounterSet& set, std::int64_t parks, std::int64_t hits, std::int64_t fix,
                   std::int64_t steal) {
    for (Counter* k : {&set.all, &set.small}) {
      k->current += hits - parks + fix + steal;
      k->allocated += hits;
      k->freed += parks - fix;
      k->peak = std::max(k->peak, k->current);
    }
  };
  adjust(s.allocated_bytes, pb, hb, 0, steal_b_);
  adjust(s.active_bytes, pb, hb, 0, steal_b_);
  adjust(s.requested_bytes, pr, hr, fix_r_, steal_r_);
  adjust(s.allocation, pn, hn, 0, steal_n_);
  adjust(s.active, pn, hn, 0, steal_n_);
}

void* CachingAllocator::Impl::allocate(std::size_t size, Stream stream) {
  if (tc_on_)
    if (void* p = cached_allocate(size, stream)) return p;
  return allocate_locked(size, stream);
}

void CachingAllocator::Impl::deallocate(void* ptr) {
  if (tc_on_ && cached_deallocate(ptr)) return;
  deallocate_locked(ptr);
}

void* CachingAllocator::do_allocate(std::size_t size, Stream stream) {
  return impl_->allocate(size, stream);
}

void CachingAllocator::do_deallocate(void* ptr) {
  impl_->deallocate(ptr);
}

}  // namespace modelmem::alloc
