// The byte formatting and size parsing every layer uses (modelmem/core/bytes.hpp).
#include "modelmem/core/bytes.hpp"

#include <gtest/gtest.h>

#include <string>

#include "modelmem/core/error.hpp"

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

// Every size flag (--device-memory, --overhead, --devices, solve --capacity, Python's sizes)
// reads sizes with this one parser.
TEST(ParseSize, UnitsMeanWhatTheySay) {
  EXPECT_EQ(parse_size("1024", "x"), 1024u);
  EXPECT_EQ(parse_size("16GiB", "x"), std::size_t{16} << 30);
  EXPECT_EQ(parse_size("512MiB", "x"), std::size_t{512} << 20);
  EXPECT_EQ(parse_size("1.5GiB", "x"), std::size_t{3} << 29);
  // A unit means what it says: GB is 10^9 bytes, GiB 2^30; a bare G says neither.
  EXPECT_EQ(parse_size("80GB", "x"), std::size_t{80'000'000'000});
  EXPECT_EQ(parse_size("16 gb", "x"), std::size_t{16'000'000'000});
  EXPECT_EQ(parse_size("4KiB", "x"), 4096u);
  EXPECT_EQ(parse_size("4kB", "x"), 4000u);
  EXPECT_THROW(parse_size("1.5G", "x"), InvalidInput);
  EXPECT_THROW(parse_size("4k", "x"), InvalidInput);
  // An absurd size is refused with the range.
  try {
    parse_size("100000000TiB", "--device-memory");
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("from 1 byte to 8 EiB"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_size("0", "x"), InvalidInput);
  EXPECT_THROW(parse_size("", "x"), InvalidInput);
  EXPECT_THROW(parse_size("12 parsecs", "x"), InvalidInput);
  EXPECT_THROW(parse_size("-3G", "x"), InvalidInput);
}

}  // namespace
}  // namespace modelmem
