// A capacity-limited device: a simulated accelerator on top of another device, with a hard
// capacity and optionally no virtual memory, so tests and replays exercise the paths a real
// accelerator takes (OOM at capacity, the expandable-segments fallback).
#pragma once

#include <cstddef>
#include <string>

#include "modelmem/device/device.hpp"

namespace modelmem::device {

/// Wraps `upstream` with a hard capacity (bytes allocated + mapped never exceed it) and, when
/// `virtual_memory` is false, no virtual-memory support at all: it stands in for an
/// accelerator whose driver lacks it (many Ascend NPU setups), so the fallback path is real.
/// memory_info() reports the capacity and what is left of it. Named "limited:<index>".
DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory = false,
                              int index = 0);

/// Another machine's accelerator, simulated for replays of its trace (a PyTorch snapshot of an
/// 80 GiB GPU replayed on a laptop): the capacity-limited device over address space that is
/// never backed by memory. allocate() maps address space with MAP_NORESERVE (nothing is
/// committed unless written), reserve() takes PROT_NONE address space, map() and unmap() only
/// count; host_accessible() is false, so no strategy writes to it, and a replay must not touch
/// it either. With virtual memory, the granularity is 2 MiB (CUDA's). Named `name` ("cuda:0").
DevicePtr make_simulated_device(std::size_t capacity, std::string name, bool virtual_memory = true);

}  // namespace modelmem::device
