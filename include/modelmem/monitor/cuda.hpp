// The CUDA query of `modelmem info`, built with the CUDA backend (MODELMEM_HAVE_CUDA).
#pragma once

namespace modelmem::monitor {

/// Registers the "cuda" query of query_device_memory (per-device total, free, used and
/// per-process usage from NVML, the driver's management library; no CUDA context is created).
void register_cuda_memory_query();

}  // namespace modelmem::monitor
