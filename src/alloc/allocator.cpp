// The allocator contract's out-of-line half: what the public functions do when someone watches
// (a listener, or the invariant checks), and the clock and thread ids events carry.
#include "modelmem/alloc/allocator.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/alloc/unchecked_scope.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc {
namespace {

thread_local bool t_unchecked = false;  // an UncheckedScope lives on this thread

bool invariant_checks_wanted() noexcept {
  if (t_unchecked) return false;
#ifdef MODELMEM_CHECK_INVARIANTS
  return true;
#else
  const char* v = std::getenv("MODELMEM_CHECK_INVARIANTS");
  return v != nullptr && std::strcmp(v, "1") == 0;
#endif
}

}  // namespace

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t this_thread_id() noexcept {
  // Small dense ids (0, 1, 2, ... in order of first use) read better in traces than pthread ids.
  static std::atomic<std::uint64_t> next{0};
  thread_local std::uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

Allocator::Allocator() : checking_(invariant_checks_wanted()) {}

UncheckedScope::UncheckedScope() noexcept : previous_(t_unchecked) {
  t_unchecked = true;
}
UncheckedScope::~UncheckedScope() {
  t_unchecked = previous_;
}

void Allocator::attach(Listener* listener, bool outer) noexcept {
  outer_.store(outer || listener == nullptr, std::memory_order_relaxed);
  listener_.store(listener, std::memory_order_release);
  do_set_listener(listener);
}

void Allocator::refuse_zero_size() const {
  const std::string d = describe();
  throw InvalidInput(d.substr(0, d.find_first_of(" :(,")) + ": allocation of 0 bytes");
}

void* Allocator::allocate_observed(std::size_t size, Stream stream) {
  Listener* l = outer_.load(std::memory_order_relaxed) ? listener() : nullptr;
  void* p = nullptr;
  try {
    p = do_allocate(size, stream);
  } catch (const OutOfMemory&) {
    // A router's OOM (a pool over its quota) names the pool the request went to.
    if (l != nullptr)
      l->on_event(oom_event(size, stream, pools().empty() ? 0 : current_pool_id(*this)));
    if (checking_) verify("a failed allocate");
    throw;
  } catch (...) {
    if (checking_) verify("a failed allocate");
    throw;
  }
  if (l != nullptr) {
    const std::uint32_t pool = pools().empty() ? 0 : do_block(p).pool;
    l->on_event(
        block_event(EventKind::kAlloc, reinterpret_cast<std::uintptr_t>(p), size, stream, pool));
  }
  if (checking_) verify("allocate", p, size);
  return p;
}

void Allocator::deallocate_observed(void* ptr) {
  Listener* l = outer_.load(std::memory_order_relaxed) ? listener() : nullptr;
  if (l != nullptr) {
    // Told before the block can be handed out again (to another thread, too), so a trace never
    // shows one address handed out twice. A pointer that is not live is refused below.
    const LiveBlock b = do_block(ptr);
    if (b.size != 0)
      l->on_event(block_event(EventKind::kFree, reinterpret_cast<std::uintptr_t>(ptr), b.size,
                              b.stream, b.pool));
  }
  try {
    do_deallocate(ptr);
  } catch (...) {
    if (checking_) verify("a refused deallocate");
    throw;
  }
  if (checking_) verify("deallocate");
}

Stats Allocator::stats() const {
  Stats s = do_stats();
  std::vector<std::string> own = warnings();
  s.warnings.insert(s.warnings.end(), own.begin(), own.end());
  return s;
}

void Allocator::reset_peak() {
  do_reset_peak();
  if (checking_) verify("reset_peak");
}

void Allocator::trim() {
  do_trim();
  if (checking_) verify("trim");
}

void Allocator::begin_step() {
  if (outer_.load(std::memory_order_relaxed)) emit_mark("step_begin");
  do_begin_step();
  if (checking_) verify("begin_step");
}

void Allocator::end_step() {
  if (outer_.load(std::memory_order_relaxed)) emit_mark("step_end");
  do_end_step();
  if (checking_) verify("end_step");
}

std::size_t Allocator::invariant_size() const {
  std::size_t n = do_invariant_size();
  if (const Allocator* up = upstream(); up != nullptr) n += up->invariant_size();
  for (const NamedPool& p : pools())
    if (p.allocator) n += p.allocator->invariant_size();
  return n;
}

bool Allocator::walk_due() const noexcept {
  const std::uint64_t op = checked_ops_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (op < next_walk_.load(std::memory_order_relaxed)) return false;
  next_walk_.store(op + walk_period(invariant_size()), std::memory_order_relaxed);
  return true;
}

void Allocator::verify(const char* after, const void* block, std::size_t size) const {
  // Every operation: the block just handed out is live at its size, and the O(1) local checks.
  // The walk over the whole state (O(elements)) runs on walk_period()'s schedule.
  std::string violation;
  if (block != nullptr) {
    const LiveBlock b = do_block(block);
    if (b.size != size)
      violation = "the block it returned (" + std::to_string(size) + " B) is " +
                  (b.size == 0 ? std::string("not live") : std::to_string(b.size) + " B live");
  }
  if (violation.empty()) violation = do_check_local();
  if (violation.empty() && walk_due()) violation = do_check_invariants();
  if (violation.empty()) return;
  std::fprintf(stderr, "modelmem: invariant broken after %s in %s: %s\n", after, describe().c_str(),
               violation.c_str());
  std::abort();
}

}  // namespace modelmem::alloc
