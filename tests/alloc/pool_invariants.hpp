// MODELMEM_EXPECT_POOL_OK(pool): the caching pool's invariant checker after an operation, in
// builds with MODELMEM_CHECK_INVARIANTS (Debug builds and the ASan build of scripts/test); a
// no-op otherwise, so the random and stress tests keep their speed in release builds.
// kCheckPoolInvariants says which, for threads that count failures instead of asserting.
#pragma once

#include <gtest/gtest.h>

#include "modelmem/alloc/caching_allocator.hpp"

#ifdef MODELMEM_CHECK_INVARIANTS
#define MODELMEM_EXPECT_POOL_OK(pool) ASSERT_EQ((pool).check_invariants(), "")
inline constexpr bool kCheckPoolInvariants = true;
#else
#define MODELMEM_EXPECT_POOL_OK(pool) ((void)(pool))
inline constexpr bool kCheckPoolInvariants = false;
#endif
