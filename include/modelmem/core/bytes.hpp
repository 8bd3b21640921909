// Byte counts as people read and write them: the one formatting and the one parser of sizes that
// every layer, the reports and the command line use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace modelmem {

/// The binary units, for code that states sizes in them (`64 * kMiB`).
inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

/// Formats a byte count as "1.50 MiB", "512 B", ... (two decimals from 1 KiB on).
std::string format_bytes(std::size_t bytes);

/// A whole number of MiB as "20 MiB", anything else as format_bytes does ("1.50 MiB").
std::string format_bytes_mib(std::size_t bytes);

/// At most 6 characters, for tables 80 columns wide: "1.5G", "20.0M", "512K", "100B".
std::string format_bytes_short(std::uint64_t bytes);

/// A byte size as a user writes it, the one parser of every size flag and argument:
/// "1073741824", "512MiB", "16GiB", "1.5GiB", "80GB" (= 80 x 10^9; a bare K/M/G/T is refused as
/// ambiguous). Throws InvalidInput naming `what`, the text and the range (1 B to 2^63).
std::size_t parse_size(const std::string& text, const std::string& what);

}  // namespace modelmem
