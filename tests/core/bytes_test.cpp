// The byte formatting every layer uses (modelmem/core/bytes.hpp).
#include "modelmem/core/bytes.hpp"

#include <gtest/gtest.h>

namespace modelmem {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

TEST(FormatBytes, TwoDecimalsFromOneKiB) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * kMiB / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes_mib(20 * kMiB), "20 MiB");
  EXPECT_EQ(format_bytes_mib(3 * kMiB / 2), "1.50 MiB");
}

TEST(FormatBytesShort, FitsSixCharacters) {
  EXPECT_EQ(format_bytes_short(0), "0B");
  EXPECT_EQ(format_bytes_short(1023), "1023B");
  EXPECT_EQ(format_bytes_short(512 << 10), "512K");
  EXPECT_EQ(format_bytes_short(20 * kMiB), "20.0M");
  EXPECT_EQ(format_bytes_short(3 * kMiB / 2 * 1024), "1.5G");
  EXPECT_EQ(format_bytes_short(~0ull), "16384P");  // still 6 characters
}

}  // namespace
}  // namespace modelmem
