// A capacity-limited device: a simulated accelerator on top of another device, with a hard
// capacity and optionally no virtual memory, so tests and replays exercise the paths a real
// accelerator takes (OOM at capacity, the expandable-segments fallback).
#pragma once

#include <cstddef>

#include "modelmem/device/device.hpp"

namespace modelmem::device {

/// Wraps `upstream` with a hard capacity (bytes allocated + mapped never exceed it) and, when
/// `virtual_memory` is false, no virtual-memory support at all: it stands in for an
/// accelerator whose driver lacks it (many Ascend NPU setups), so the fallback path is real.
/// memory_info() reports the capacity and what is left of it. Named "limited:<index>".
DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory = false,
                              int index = 0);

}  // namespace modelmem::device
