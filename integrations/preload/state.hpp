// What the parts of libmodelmem_preload.so share (preload.cpp: the interposed functions;
// publish.cpp: the monitor and the C symbols for step marks and pools).
#pragma once

#include <mutex>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "stack.hpp"

namespace modelmem::preload {

/// Serialises every call into the strategy (held across fork()).
extern std::mutex g_mutex;
/// The strategy (nullptr until the library is ready).
extern alloc::Allocator* g_alloc;
/// g_alloc when the configuration has pools.
extern alloc::PoolRouter* g_router;
/// What was built, kept for the process's lifetime (nullptr until the library is ready).
extern Stack* g_stack;

/// Depth of modelmem code on this thread: > 0 means "we are inside modelmem, use the C heap".
/// initial-exec: reading it must not allocate (a dynamic TLS block would call malloc).
extern __thread int t_depth __attribute__((tls_model("initial-exec")));

struct Inside {
  Inside() { ++t_depth; }
  ~Inside() { --t_depth; }
};

/// Whether the library serves requests (the C symbols are no-ops otherwise).
bool serving() noexcept;

/// Publishes the stack's pools to the monitor (`modelmem info`, `top`). Call once, ready, after
/// the library's own pthread_atfork handlers are registered (the publisher's run first then).
void publish_pools();

/// A request refused because it would take a pool over its quota: the one-line message on
/// stderr (the first 10 per process; the rest are counted).
void report_quota(const char* what) noexcept;

}  // namespace modelmem::preload
