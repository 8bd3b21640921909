// What every Device shares (device/device.hpp): the defaults of the optional functions.
#include "modelmem/device/device.hpp"

#include "modelmem/core/error.hpp"

namespace modelmem::device {

bool Device::prefer_large_pages(void*, std::size_t) noexcept {
  return false;
}

VmProbe Device::probe_virtual_memory() {
  return {false, "no virtual memory"};
}

std::size_t Device::granularity() const {
  return 0;
}

void* Device::reserve(std::size_t) {
  throw Unsupported(name() + ": no virtual memory");
}

void Device::release(void*, std::size_t) noexcept {}

void Device::map(void*, std::size_t) {
  throw Unsupported(name() + ": no virtual memory");
}

void Device::unmap(void*, std::size_t) noexcept {}

}  // namespace modelmem::device
