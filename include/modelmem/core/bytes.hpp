// Byte counts as people read them: the one formatting of sizes that every layer, the reports
// and the command line use.
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

}  // namespace modelmem
