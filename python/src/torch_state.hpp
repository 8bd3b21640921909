// What torch.cpp (the CPU allocator, pools) shares with logger.cpp (MemoryLogger): the event tap
// of the installed CPU allocator, the names of its pools, and the pluggable device libraries
// loaded in the process.
#pragma once

#include <cstdint>
#include <string>

#include "modelmem/alloc/events.hpp"

namespace modelmem::python {

/// Whether modelmem is PyTorch's CPU allocator in this process (use_cpu_allocator).
bool cpu_allocator_installed();
/// The CPU allocator's events to `listener` (at most one logger): false when one is attached.
bool attach_cpu_logger(alloc::Listener* listener);
/// Detaches it; no callback is inside it when this returns.
void detach_cpu_logger(alloc::Listener* listener);
/// The name of the CPU pool an event's `pool` names ("libtorch" for the allocator itself).
std::string cpu_pool_name(std::uint32_t pool);

/// A pluggable library modelmem.pool and MemoryLogger find loaded in the process by its soname.
struct DeviceLibrary {
  const char* soname;
  const char* push;  ///< pool selection
  const char* pop;
  const char* error;         ///< last error
  const char* add_listener;  ///< events (config/listener_abi.h)
  const char* remove_listener;
};
inline constexpr DeviceLibrary kDeviceLibraries[] = {
    {"libmodelmem_npu_alloc.so", "modelmem_npu_pool_push", "modelmem_npu_pool_pop",
     "modelmem_npu_last_error", "modelmem_npu_add_listener", "modelmem_npu_remove_listener"},
    {"libmodelmem_cuda_alloc.so", "modelmem_cuda_pool_push", "modelmem_cuda_pool_pop",
     "modelmem_cuda_last_error", "modelmem_cuda_add_listener", "modelmem_cuda_remove_listener"}};

}  // namespace modelmem::python
