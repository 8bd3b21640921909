// Installs a modelmem allocator as PyTorch's CPU allocator (c10::SetCPUAllocator), so every CPU
// tensor of a libtorch program comes from it, and exposes the step marks a planned arena learns
// from. Tensors allocated before install() keep their own deleter and are freed correctly.
//
// Thread-safe as the installed allocator is. install() must run before the tensors it should
// serve are created and is not itself thread-safe (as c10::SetCPUAllocator). The allocator is
// kept alive for the rest of the process (tensors may outlive any scope).
#pragma once

#include <memory>
#include <string>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::torch {

/// Installs `allocator` for every CPU tensor allocated from now on (priority 100, above
/// PyTorch's default), and publishes it to `modelmem info` / `top` (pool "libtorch", or one per
/// pool). Throws InvalidInput for a null allocator.
void install(std::shared_ptr<alloc::Allocator> allocator);
/// Builds the allocator from a config string (as MODELMEM_ALLOC_CONF) and installs it.
std::shared_ptr<alloc::Allocator> install(const std::string& config);
/// The installed allocator, or nullptr.
alloc::Allocator* installed() noexcept;

/// Routes the calling thread's CPU tensor allocations to `allocator` (a per-model pool) instead
/// of the installed one, until called again (nullptr = back to the installed allocator). Each
/// block remembers the allocator it came from and keeps it alive, so it may be freed on any
/// thread, after the route changed. Needs install() first (Unsupported otherwise).
void set_thread_allocator(std::shared_ptr<alloc::Allocator> allocator);
/// The calling thread's route, or nullptr.
std::shared_ptr<alloc::Allocator> thread_allocator();

/// Step marks for the planned arena (no-ops for other strategies): to the calling thread's
/// route when it has one, else to the installed allocator.
void begin_step();
void end_step();

/// Per-model pools (pools:[NAME:MiB,...]): the calling thread's later tensors come from pool
/// `name` until the matching pop_pool() (nested). push_pool throws InvalidInput for an unknown
/// pool or an allocator without pools; pop_pool returns false when nothing was pushed.
/// The C symbols modelmem_step_begin/end and modelmem_pool_push/pop do the same (ctypes).
void push_pool(const std::string& name);
bool pop_pool() noexcept;

/// Marks one step for its lifetime: { modelmem::torch::Step step; module.forward(inputs); }
class Step {
 public:
  Step() { begin_step(); }
  ~Step() { end_step(); }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
};

}  // namespace modelmem::torch
