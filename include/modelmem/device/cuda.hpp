// The CUDA device: segments from cudaMalloc/cudaFree, memory info from the driver, and virtual
// memory (what expandable segments need) through the driver API: cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease. Driver functions are looked
// up through the runtime at first use, so a program built with this backend starts, and reports
// "no CUDA device", on a machine without a GPU or driver. Thread-safe.
//
// Built only when CMake finds the CUDA toolkit (MODELMEM_HAVE_CUDA is then defined for users of
// the modelmem_cuda target).
#pragma once

#include <string>

#include "modelmem/device/device.hpp"

namespace modelmem::device {

/// Whether CUDA can be used here; `reason` says why not ("no CUDA driver", "no CUDA device").
struct CudaAvailability {
  bool available = false;
  int device_count = 0;
  std::string reason;
};
CudaAvailability cuda_availability() noexcept;

/// The device `index` ("cuda:<index>"). Throws Unsupported when CUDA or that device is missing.
/// Physical memory for map() comes in pieces of the device's allocation granularity (2 MiB on
/// current GPUs), one handle each, so any page-aligned range can be unmapped later.
/// unmap() and release() synchronise the device first: the GPU may still use the memory.
DevicePtr make_cuda_device(int index = 0);

}  // namespace modelmem::device
