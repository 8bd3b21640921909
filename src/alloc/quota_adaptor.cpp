// The quota ledger is charged before the upstream is asked and refunded if the upstream fails,
// so concurrent requests can never together overshoot the quota.
#include "modelmem/alloc/quota_adaptor.hpp"

#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "invariant_probe.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc {

struct QuotaAdaptor::Impl {
  std::shared_ptr<Allocator> upstream;
  QuotaOptions options;
  mutable std::mutex mutex;
  std::unordered_map<std::uintptr_t, std::size_t> charged;
  std::size_t used = 0;
  std::size_t in_flight = 0;  // of `used`: charges of requests under way, not in `charged`
  std::size_t peak = 0;

  void refund(std::size_t charge) {
    std::lock_guard<std::mutex> lock(mutex);
    used -= charge;
    in_flight -= charge;
  }
  std::int64_t refused = 0;
};

QuotaAdaptor::QuotaAdaptor(std::shared_ptr<Allocator> upstream, QuotaOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!upstream) throw InvalidInput("quota: no upstream allocator");
  if (options.quota == 0) throw InvalidInput("quota: pool '" + options.name + "' has quota 0");
  if (options.granularity == 0 || (options.granularity & (options.granularity - 1)) != 0)
    throw InvalidInput("quota: granularity must be a power of two");
  impl_->upstream = std::move(upstream);
  impl_->options = std::move(options);
}

QuotaAdaptor::~QuotaAdaptor() = default;

namespace {
// The whole MiB a quota needs to hold `in_use` and `charge` more.
std::size_t serving_mib(std::size_t in_use, std::size_t charge) {
  const std::size_t mib = std::size_t{1} << 20;
  return in_use / mib + (charge + in_use % mib + mib - 1) / mib;
}
}  // namespace

void* QuotaAdaptor::do_allocate(std::size_t size, Stream stream) {
  Impl& m = *impl_;
  const std::size_t g = m.options.granularity;
  // Sizes beyond the quota are refused before rounding, which could overflow.
  const std::size_t charge = size > m.options.quota ? size : (size + g - 1) & ~(g - 1);
  {
    std::unique_lock<std::mutex> lock(m.mutex);
    if (charge > m.options.quota - m.used) {
      ++m.refused;
      const std::size_t in_use = m.used;
      lock.unlock();
      Stats up = m.upstream->stats();
      OomInfo info;
      info.requested = size;
      info.reserved = static_cast<std::size_t>(up.reserved_bytes.all.current);
      info.allocated = static_cast<std::size_t>(up.allocated_bytes.all.current);
      info.largest_free_block = up.largest_free_block;
      info.quota = m.options.quota;
      info.where = "pool '" + m.options.name + "'";
      if (m.options.device) info.device_free = m.options.device->memory_info().free;
      // The device's free memory only when a device was asked (a CPU pool's quota has none:
      // "device free 0 B" was a figure nobody measured).
      std::string numbers = modelmem::describe(info);
      if (!m.options.device) {
        const std::string absent = ", device free " + format_bytes(0);
        if (auto at = numbers.find(absent); at != std::string::npos)
          numbers.erase(at, absent.size());
      }
      throw QuotaExceeded(info, "pool '" + m.options.name + "' would exceed its quota: requested " +
                                    format_bytes(size) + " with " + format_bytes(in_use) +
                                    " in use of its quota of " + format_bytes(m.options.quota) +
                                    " (" + numbers + "); to change: a quota of at least " +
                                    std::to_string(serving_mib(in_use, charge)) + " MiB (pools:[" +
                                    m.options.name + ":" +
                                    std::to_string(serving_mib(in_use, charge)) + ",...])");
    }
    m.used += charge;
    m.in_flight += charge;
    if (m.used > m.peak) m.peak = m.used;
  }
  void* ptr = nullptr;
  try {
    ptr = m.upstream->allocate(size, stream);
  } catch (const QuotaExceeded&) {
    m.refund(charge);
    throw;
  } catch (const OutOfMemory& e) {
    m.refund(charge);
    // The pool itself ran out below its quota (fragmentation, rounding, caching): same numbers,
    // with the quota and the pool's name added.
    OomInfo info = e.info();
    info.quota = m.options.quota;
    info.where =
        "pool '" + m.options.name + "'" + (info.where.empty() ? "" : " (" + info.where + ")");
    throw OutOfMemory(info, "pool '" + m.options.name + "': " + e.what() + "; quota " +
                                format_bytes(m.options.quota));
  } catch (...) {
    m.refund(charge);
    throw;
  }
  std::lock_guard<std::mutex> lock(m.mutex);
  m.charged.emplace(reinterpret_cast<std::uintptr_t>(ptr), charge);
  m.in_flight -= charge;
  return ptr;
}

void QuotaAdaptor::do_deallocate(void* ptr) {
  Impl& m = *impl_;
  std::size_t charge = 0;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto it = m.charged.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == m.charged.end()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%p", ptr);
      throw InvalidInput("pool '" + m.options.name + "': free of " + buf +
                         ", which is not a live block of this pool (double free, or another "
                         "pool's block?)");
    }
    charge = it->second;
    m.charged.erase(it);
    m.in_flight += charge;
  }
  try {
    m.upstream->deallocate(ptr);
  } catch (...) {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.charged.emplace(reinterpret_cast<std::uintptr_t>(ptr), charge);
    m.in_flight -= charge;
    throw;
  }
  m.refund(charge);
}

Stats QuotaAdaptor::do_stats() const {
  Stats s = impl_->upstream->stats();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  s.num_ooms += impl_->refused;
  return s;
}

void QuotaAdaptor::do_reset_peak() {
  impl_->upstream->reset_peak();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->peak = impl_->used;
}

void QuotaAdaptor::do_trim() {
  impl_->upstream->trim();
}

std::string QuotaAdaptor::do_describe() const {
  return "quota " + format_bytes(impl_->options.quota) + " for pool '" + impl_->options.name +
         "' over " + impl_->upstream->describe();
}

void QuotaAdaptor::do_begin_step() {
  impl_->upstream->begin_step();
}
void QuotaAdaptor::do_end_step() {
  impl_->upstream->end_step();
}

LiveBlock QuotaAdaptor::do_block(const void* ptr) const {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->charged.count(reinterpret_cast<std::uintptr_t>(ptr)) == 0) return {};
  }
  return impl_->upstream->block(ptr);
}

Allocator* QuotaAdaptor::do_upstream() const noexcept {
  return impl_->upstream.get();
}

void QuotaAdaptor::do_set_listener(Listener* listener) noexcept {
  attach_upstream(*impl_->upstream, listener);
}

// The ledger: what is charged equals the live blocks' charges plus those of requests under way,
// within the quota; then the upstream's own invariants.
std::string QuotaAdaptor::do_check_invariants() const {
  const Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    std::size_t sum = m.in_flight;
    for (const auto& [address, charge] : m.charged) sum += charge;
    if (sum != m.used)
      return "pool '" + m.options.name + "': " + std::to_string(m.used) +
             " bytes charged, the live blocks' charges add up to " + std::to_string(sum);
  }
  if (std::string v = do_check_local(); !v.empty()) return v;
  return m.upstream->check_invariants();
}

std::size_t QuotaAdaptor::quota() const noexcept {
  return impl_->options.quota;
}

std::size_t QuotaAdaptor::used() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->used;
}

std::size_t QuotaAdaptor::peak_used() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->peak;
}

const std::string& QuotaAdaptor::name() const noexcept {
  return impl_->options.name;
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(QuotaAdaptor& a, std::int64_t delta) {
  std::lock_guard<std::mutex> lock(a.impl_->mutex);
  a.impl_->used = static_cast<std::size_t>(static_cast<std::int64_t>(a.impl_->used) + delta);
}

std::string QuotaAdaptor::do_check_local() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.used > m.options.quota || m.peak < m.used || m.in_flight > m.used)
    return "pool '" + m.options.name + "': " + std::to_string(m.used) +
           " bytes charged with a quota of " + std::to_string(m.options.quota) + ", peak " +
           std::to_string(m.peak) + " and " + std::to_string(m.in_flight) + " in flight";
  return {};
}

std::size_t QuotaAdaptor::do_invariant_size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->charged.size();
}

}  // namespace modelmem::alloc
