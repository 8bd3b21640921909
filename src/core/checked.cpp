// Overflow-checked size arithmetic (modelmem/core/checked.hpp).
#include "modelmem/core/checked.hpp"

#include <string>

#include "modelmem/core/error.hpp"

namespace modelmem {

std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw InvalidInput(std::string(what) + ": size overflows 64 bits");
  return r;
}

std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw InvalidInput(std::string(what) + ": size overflows 64 bits");
  return r;
}

std::size_t checked_align_up(std::size_t value, std::size_t alignment, const char* what) {
  if (alignment <= 1) return value;
  std::size_t rem = value % alignment;
  if (rem == 0) return value;
  return checked_add(value, alignment - rem, what);
}

}  // namespace modelmem
