// How a pluggable library (CUDA, NPU) shows the stack it built in `modelmem info` / `top`: the
// pool's name, its device, the strategy as the monitor names it and its budget in bytes.
#pragma once

#include <string>
#include <vector>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/monitor/publisher.hpp"

namespace modelmem::config {

/// The pool is named by $MODELMEM_POOL_NAME, else `default_name` ("pytorch", "npu"); its
/// strategy is the `strategy` setting, "expandable" for the caching pool on expandable segments;
/// its budget is the static pool's size in bytes when static_pool_mb is given, else 0 (none).
monitor::PoolInfo pool_info(const Config& config, const Built& built,
                            const std::string& default_name, const std::string& device);

/// Publishes a pluggable library's stack: the stack itself as pool_info() describes it, or, with
/// pools:[...], each pool under its own name with its quota as budget, and the process's own
/// stack (when there is one) under the default name. The registrations end the publishing.
std::vector<monitor::PoolRegistration> publish_stack(const Config& config, const Built& built,
                                                     const std::string& default_name,
                                                     const std::string& device);

/// What a library's pool-push function does for a thread (modelmem_npu_pool_push,
/// modelmem_cuda_pool_push): selects pool `name` of `stack` for the thread's later requests.
/// Returns 0 when selected, 1 when the stack has no pools (nothing to route: the string has no
/// pools:[...]), -1 with `why` set for a name that is not one of them or not a pool name.
int push_pool(alloc::Allocator& stack, const char* name, std::string& why);
/// Ends the thread's innermost selection: 0, or 1 when the stack has no pools, -1 when there
/// was no selection.
int pop_pool(alloc::Allocator& stack, std::string& why);

/// What a library's free does when it fails (a double free, a pointer it did not hand out, a
/// device without a stack; the framework's free has no error path): "free of PTR on DEVICE
/// failed: WHY" (without " on DEVICE" when `device` is null) on stderr, and as the thread's
/// `last_error`, replacing an older message (cleared when there is no memory for the new one).
void report_failed_free(std::string& last_error, const void* ptr, const char* device,
                        const char* why) noexcept;

}  // namespace modelmem::config
