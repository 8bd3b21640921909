// How a pluggable library (CUDA, NPU) shows the stack it built in `modelmem info` / `top`: the
// pool's name, its device, the strategy as the monitor names it and its budget in bytes.
#pragma once

#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/monitor/publisher.hpp"

namespace modelmem::config {

/// The pool is named by $MODELMEM_POOL_NAME, else `default_name` ("pytorch", "npu"); its
/// strategy is the `strategy` setting, "expandable" for the caching pool on expandable segments;
/// its budget is the static pool's size in bytes when static_pool_mb is given, else 0 (none).
monitor::PoolInfo pool_info(const Config& config, const Built& built,
                            const std::string& default_name, const std::string& device);

}  // namespace modelmem::config
