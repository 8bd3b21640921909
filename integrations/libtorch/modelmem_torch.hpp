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
/// PyTorch's default). Throws InvalidInput for a null allocator.
void install(std::shared_ptr<alloc::Allocator> allocator);
/// Builds the allocator from a config string (as MODELMEM_ALLOC_CONF) and installs it.
std::shared_ptr<alloc::Allocator> install(const std::string& config);
/// The installed allocator, or nullptr.
alloc::Allocator* installed() noexcept;

/// Step marks for the planned arena (no-ops for other strategies).
void begin_step();
void end_step();

/// Marks one step for its lifetime: { modelmem::torch::Step step; module.forward(inputs); }
class Step {
 public:
  Step() { begin_step(); }
  ~Step() { end_step(); }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
};

}  // namespace modelmem::torch
