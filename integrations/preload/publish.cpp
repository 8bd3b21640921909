// The preload's pools in `modelmem info` / `top`, and the C symbols a program (or Python through
// ctypes) calls for step marks and per-thread pools. Everything here runs as modelmem code
// (Inside): the C heap serves its own allocations, so the library never allocates through itself.
#include <errno.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "state.hpp"

namespace modelmem::preload {
namespace {

// Requests a full pool passed to the next allocator: slot 0 is the main stack, slot i + 1 the
// router's pool i (pools past the last slot share it).
constexpr std::size_t kPassedSlots = 64;
struct PassedOn {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> first_size{0};
};
PassedOn g_passed[kPassedSlots];
std::atomic<bool> g_passed_told{false};

std::size_t slot_of_current() {
  if (!g_has_pools) return 0;
  const std::string name = alloc::current_pool(*g_alloc);
  if (name.empty()) return 0;
  const auto pools = g_alloc->pools();
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (pools[i].name == name) return std::min(i + 1, kPassedSlots - 1);
  return 0;
}

std::string slot_name(std::size_t slot) {
  if (slot == 0 || !g_has_pools) return "the main stack";
  return "pool '" + g_alloc->pools()[slot - 1].name + "'";
}

std::string passed_text(std::size_t slot) {
  const std::uint64_t n = g_passed[slot].count.load(std::memory_order_relaxed);
  return std::to_string(n) + (n == 1 ? " request" : " requests") +
         " passed to the next allocator, outside the pool (the first of " +
         format_bytes(g_passed[slot].first_size.load(std::memory_order_relaxed)) + ")";
}

// Shows one allocator to the publisher: its statistics are read as modelmem code, under the
// library's mutex (the order every allocation takes too), so the publisher's thread never
// calls into the strategy while another thread allocates, and never allocates through it.
class Guarded final : public alloc::Allocator {
 public:
  Guarded(alloc::Allocator* inner, std::string describe, std::size_t slot)
      : inner_(inner), describe_(std::move(describe)), slot_(slot) {}

  void fill(monitor::PoolSnapshot& s) const {
    if (const std::uint64_t n = g_passed[slot_].count.load(std::memory_order_relaxed); n > 0) {
      Inside inside;
      if (s.warning_count == 0) s.warning = passed_text(slot_);
      s.warning_count += n;
    }
  }

 private:
  void* do_allocate(std::size_t, alloc::Stream) override {
    throw Unsupported("monitor view: not an allocator");
  }
  void do_deallocate(void*) override { throw Unsupported("monitor view: not an allocator"); }
  alloc::Stats do_stats() const override {
    Inside inside;
    std::lock_guard lock(g_mutex);
    return inner_->stats();
  }
  void do_reset_peak() override {}
  std::string do_describe() const override { return describe_; }
  alloc::LiveBlock do_block(const void*) const override { return {}; }

  alloc::Allocator* inner_;
  std::string describe_;
  std::size_t slot_;
};

struct Published {
  std::vector<std::shared_ptr<Guarded>> views;
  std::vector<monitor::PoolRegistration> registrations;
};

std::atomic<unsigned> g_quota_reports{0};

}  // namespace

void publish_pools() {
  Inside inside;
  try {
    // Kept for the process's lifetime, as the stack itself.
    auto* p = new Published();
    const std::string strategy = g_stack->config.get("strategy");
    std::size_t slot = 0;
    auto add = [&](alloc::Allocator* a, const std::string& name, std::size_t budget) {
      auto view = std::make_shared<Guarded>(a, a->describe(), std::min(slot++, kPassedSlots - 1));
      monitor::PoolInfo info;
      info.name = name;
      info.device = "host";
      info.strategy = strategy;
      info.budget = budget;
      Guarded* raw = view.get();
      p->registrations.push_back(monitor::publish(
          view, std::move(info), [raw](monitor::PoolSnapshot& s) { raw->fill(s); }));
      p->views.push_back(std::move(view));
    };
    if (g_has_pools) {
      if (alloc::Allocator* main = g_alloc->upstream())
        add(main, "preload", 0);
      else
        slot = 1;
      for (const auto& pool : g_alloc->pools()) add(pool.allocator.get(), pool.name, pool.quota);
    } else {
      add(g_alloc, "preload", 0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelmem preload: not published to the monitor: %s\n", e.what());
  }
}

void report_passed_on(std::size_t size) noexcept {
  try {
    const std::size_t slot = slot_of_current();
    PassedOn& p = g_passed[slot];
    if (p.count.fetch_add(1, std::memory_order_relaxed) == 0)
      p.first_size.store(size, std::memory_order_relaxed);
    if (g_passed_told.exchange(true)) return;
    std::string size_text;
    if (slot > 0)
      size_text = " of " + format_bytes(g_alloc->pools()[slot - 1].quota);
    else if (g_alloc != nullptr)
      size_text =
          " (" +
          format_bytes(static_cast<std::size_t>(g_alloc->stats().reserved_bytes.all.current)) +
          " reserved)";
    std::fprintf(stderr,
                 "modelmem preload: %s%s is full: a request of %s goes to the next allocator, "
                 "outside the pool; further ones are counted (--report, modelmem info), not "
                 "printed\n",
                 slot_name(slot).c_str(), size_text.c_str(), format_bytes(size).c_str());
  } catch (...) {
  }
}

std::string passed_on_summary() {
  std::string out;
  for (std::size_t slot = 0; slot < kPassedSlots; ++slot)
    if (g_passed[slot].count.load(std::memory_order_relaxed) > 0)
      out += (out.empty() ? "" : "; ") + slot_name(slot) + ": " + passed_text(slot);
  return out;
}

void report_quota(const char* what) noexcept {
  const unsigned n = g_quota_reports.fetch_add(1, std::memory_order_relaxed);
  if (n < 10)
    std::fprintf(stderr, "modelmem preload: %s\n", what);
  else if (n == 10)
    std::fprintf(stderr, "modelmem preload: further quota refusals are not printed\n");
}

}  // namespace modelmem::preload

using namespace modelmem::preload;

extern "C" {

/// Marks the start of a step (planned_steps:marked) for the calling thread's pool. 0, or -1
/// (errno ENODEV) when the library does not serve requests.
__attribute__((visibility("default"))) int modelmem_step_begin(void) {
  if (!serving()) {
    errno = ENODEV;
    return -1;
  }
  Inside inside;
  std::lock_guard lock(g_mutex);
  g_alloc->begin_step();
  return 0;
}

/// Marks the end of a step. As modelmem_step_begin.
__attribute__((visibility("default"))) int modelmem_step_end(void) {
  if (!serving()) {
    errno = ENODEV;
    return -1;
  }
  Inside inside;
  std::lock_guard lock(g_mutex);
  g_alloc->end_step();
  return 0;
}

/// Sends the calling thread's later requests to pool `name` (pools:[...]); nests. 0, or -1 with
/// errno ENODEV (no pools configured, or the library does not serve requests), ENOENT (no pool
/// of that name) or EOVERFLOW (nested more than 16 deep).
__attribute__((visibility("default"))) int modelmem_pool_push(const char* name) {
  if (!serving() || !g_has_pools) {
    errno = ENODEV;
    return -1;
  }
  if (name == nullptr) {
    errno = ENOENT;
    return -1;
  }
  Inside inside;
  const std::string wanted(name);
  bool known = false;
  for (const auto& p : g_alloc->pools()) known = known || p.name == wanted;
  if (!known) {
    errno = ENOENT;
    return -1;
  }
  try {
    modelmem::alloc::push_pool(*g_alloc, wanted);
  } catch (const std::exception&) {
    errno = EOVERFLOW;
    return -1;
  }
  return 0;
}

/// Ends the calling thread's innermost pool selection. 0, or -1 (errno EINVAL) when there is
/// none, ENODEV as modelmem_pool_push.
__attribute__((visibility("default"))) int modelmem_pool_pop(void) {
  if (!serving() || !g_has_pools) {
    errno = ENODEV;
    return -1;
  }
  if (!modelmem::alloc::pop_pool()) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

/// The pool the calling thread's requests go to now: its name, "" for the process's own stack,
/// or NULL when there are no pools. The string lives as long as the process.
__attribute__((visibility("default"))) const char* modelmem_pool_current(void) {
  if (!serving() || !g_has_pools) return nullptr;
  Inside inside;
  const std::string name = modelmem::alloc::current_pool(*g_alloc);
  for (const auto& p : g_alloc->pools())
    if (p.name == name) return p.name.c_str();
  return "";
}

}  // extern "C"
