// Overflow-checked size arithmetic: every size computed from user input (config strings, plan
// files, traces, models) goes through these, so an overflow is an InvalidInput naming what
// overflowed instead of a wrapped size.
#pragma once

#include <cstddef>

namespace modelmem {

/// a + b; throws InvalidInput naming `what` when it overflows 64 bits.
std::size_t checked_add(std::size_t a, std::size_t b, const char* what);
/// a * b; throws InvalidInput naming `what` when it overflows 64 bits.
std::size_t checked_mul(std::size_t a, std::size_t b, const char* what);
/// Rounds `value` up to a multiple of `alignment` (any positive value), overflow-checked.
std::size_t checked_align_up(std::size_t value, std::size_t alignment, const char* what);

}  // namespace modelmem
