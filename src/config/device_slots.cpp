// The per-device stacks of a pluggable library (config/device_slots.hpp): one table for the
// CUDA and NPU libraries.
#include "modelmem/config/device_slots.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>

#include "modelmem/config/factory.hpp"
#include "modelmem/config/publish.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::config {

DeviceSlots::DeviceSlots(Options options)
    : options_(std::move(options)), slots_(std::make_unique<Slot[]>(kMaxDevices)) {}

void DeviceSlots::build(Slot& s, int device) {
  const std::string name = options_.kind + ":" + std::to_string(device);
  try {
    Configured c = options_.configure(device);
    Built b = config::build(c.config, options_.make_device(device));
    s.allocator = b.allocator;
    s.registrations = publish_stack(c.config, b, options_.pool_name, name);
    s.relay = relay_stack(listeners_, c.config, b, options_.pool_name, device, name);
    if (const char* v = std::getenv("MODELMEM_VERBOSE"); v != nullptr && *v == '1')
      std::fprintf(stderr, "modelmem: %s (config from %s): %s\n", name.c_str(), c.source.c_str(),
                   s.allocator->describe().c_str());
    s.ready.store(true, std::memory_order_release);
  } catch (const std::exception& e) {
    s.allocator.reset();
    s.error = e.what();
    std::fprintf(stderr, "modelmem: cannot build the allocator for %s: %s\n", name.c_str(),
                 e.what());
  }
}

alloc::Allocator& DeviceSlots::get(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw InvalidInput("device index " + std::to_string(device) + " out of range (0 to " +
                       std::to_string(kMaxDevices - 1) + ")");
  Slot& s = slots_[static_cast<std::size_t>(device)];
  std::call_once(s.once, [&] { build(s, device); });
  if (!s.ready.load(std::memory_order_acquire))
    throw Error("no allocator for " + options_.kind + ":" + std::to_string(device) + ": " +
                s.error);
  return *s.allocator;
}

alloc::Allocator* DeviceSlots::built(int device) const noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  const Slot& s = slots_[static_cast<std::size_t>(device)];
  return s.ready.load(std::memory_order_acquire) ? s.allocator.get() : nullptr;
}

int DeviceSlots::stats(int device, unsigned long long* out, int n) const noexcept {
  alloc::Allocator* a = built(device);
  if (a == nullptr || out == nullptr) return -1;
  try {
    const alloc::Stats st = a->stats();
    const long long values[] = {st.reserved_bytes.all.current, st.allocated_bytes.all.current,
                                st.reserved_bytes.all.peak,    st.allocated_bytes.all.peak,
                                st.num_device_alloc,           st.num_ooms};
    int k = 0;
    for (; k < n && k < static_cast<int>(std::size(values)); ++k)
      out[k] = static_cast<unsigned long long>(values[k] < 0 ? 0 : values[k]);
    return k;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace modelmem::config
