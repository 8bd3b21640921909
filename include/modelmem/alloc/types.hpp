// The one type every layer of the allocator stack shares: the opaque stream handle.
#pragma once

#include <cstdint>

namespace modelmem::alloc {

/// Opaque stream handle (a cudaStream_t on CUDA; 0 is the default stream).
using Stream = std::uintptr_t;

}  // namespace modelmem::alloc
