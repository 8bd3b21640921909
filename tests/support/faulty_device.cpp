// The fault injector: fails chosen calls and keeps a ledger of everything taken, so a test can
// prove that an allocator gives back exactly what it took, once, whatever failed on the way.
#include "support/faulty_device.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::device {

FaultyDevice::FaultyDevice(DevicePtr upstream, Predicate should_fail)
    : upstream_(std::move(upstream)), should_fail_(std::move(should_fail)) {
  if (!upstream_) throw InvalidInput("faulty device: no upstream device");
}

FaultyDevice::~FaultyDevice() = default;

std::string FaultyDevice::name() const {
  return "faulty(" + upstream_->name() + ")";
}

bool FaultyDevice::fail_now(FaultOp op) {
  // Called with mu_ held.
  const std::uint64_t n = calls_[static_cast<int>(op)]++;
  if (should_fail_ && should_fail_(op, n)) {
    ++injected_;
    return true;
  }
  return false;
}

namespace {
[[noreturn]] void injected_oom(const std::string& where, std::size_t bytes, const char* call) {
  OomInfo info;
  info.requested = bytes;
  info.where = where;
  throw OutOfMemory(info, describe(info) + " (injected failure of " + call + ")");
}
}  // namespace

void* FaultyDevice::allocate(std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (fail_now(FaultOp::kAllocate)) injected_oom(name(), bytes, "allocate");
  }
  void* p = upstream_->allocate(bytes);
  std::lock_guard lock(mu_);
  allocations_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  return p;
}

void FaultyDevice::deallocate(void* ptr, std::size_t bytes) noexcept {
  {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocations_.end() || it->second != bytes) {
      ++bad_;
      return;  // never pass a bad free on: the upstream would unmap someone else's memory
    }
    allocations_.erase(it);
  }
  upstream_->deallocate(ptr, bytes);
}

MemoryInfo FaultyDevice::memory_info() const {
  return upstream_->memory_info();
}

bool FaultyDevice::prefer_large_pages(void* addr, std::size_t bytes) noexcept {
  return upstream_->prefer_large_pages(addr, bytes);
}

VmProbe FaultyDevice::probe_virtual_memory() {
  return upstream_->probe_virtual_memory();
}

std::size_t FaultyDevice::granularity() const {
  return upstream_->granularity();
}

void* FaultyDevice::reserve(std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (fail_now(FaultOp::kReserve)) injected_oom(name(), bytes, "reserve");
  }
  void* p = upstream_->reserve(bytes);
  std::lock_guard lock(mu_);
  reservations_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  if (page_ == 0) page_ = upstream_->granularity();
  return p;
}

void FaultyDevice::release(void* base, std::size_t bytes) noexcept {
  {
    std::lock_guard lock(mu_);
    auto it = reservations_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == reservations_.end() || it->second != bytes) {
      ++bad_;
      return;
    }
    const auto lo = it->first;
    if (mapped_pages_.lower_bound(lo) != mapped_pages_.lower_bound(lo + bytes))
      ++bad_;  // released with pages still mapped
    reservations_.erase(it);
  }
  upstream_->release(base, bytes);
}

void FaultyDevice::map(void* addr, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  {
    std::lock_guard lock(mu_);
    if (fail_now(FaultOp::kMap)) injected_oom(name(), bytes, "map");
  }
  upstream_->map(addr, bytes);
  std::lock_guard lock(mu_);
  if (page_ == 0) page_ = upstream_->granularity();
  for (std::uintptr_t p = a; p < a + bytes; p += page_)
    if (!mapped_pages_.insert(p).second) ++bad_;  // mapped twice
}

void FaultyDevice::unmap(void* addr, std::size_t bytes) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  {
    std::lock_guard lock(mu_);
    if (page_ == 0) {
      ++bad_;
      return;
    }
    for (std::uintptr_t p = a; p < a + bytes; p += page_)
      if (mapped_pages_.erase(p) == 0) ++bad_;  // not mapped
  }
  upstream_->unmap(addr, bytes);
}

std::uint64_t FaultyDevice::calls(FaultOp op) const {
  std::lock_guard lock(mu_);
  return calls_[static_cast<int>(op)];
}

std::uint64_t FaultyDevice::injected_failures() const {
  std::lock_guard lock(mu_);
  return injected_;
}

std::size_t FaultyDevice::outstanding_bytes() const {
  std::lock_guard lock(mu_);
  std::size_t total = mapped_pages_.size() * page_;
  for (const auto& [addr, bytes] : allocations_) total += bytes;
  return total;
}

std::size_t FaultyDevice::outstanding_reservations() const {
  std::lock_guard lock(mu_);
  return reservations_.size();
}

std::uint64_t FaultyDevice::bad_calls() const {
  std::lock_guard lock(mu_);
  return bad_;
}

void FaultyDevice::set_predicate(Predicate should_fail) {
  std::lock_guard lock(mu_);
  should_fail_ = std::move(should_fail);
}

std::shared_ptr<FaultyDevice> make_faulty_device(
    DevicePtr upstream, std::function<bool(FaultOp op, std::uint64_t n)> should_fail) {
  return std::make_shared<FaultyDevice>(std::move(upstream), std::move(should_fail));
}

}  // namespace modelmem::device
