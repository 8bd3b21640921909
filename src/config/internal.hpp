// Helpers the parser (config.cpp) and the factory (factory.cpp) share; not public.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/config/factory.hpp"
#include "modelmem/plan/presets.hpp"

namespace modelmem::config::detail {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
/// A size in MiB must still fit in 64 bits as bytes.
inline constexpr std::size_t kMaxMb = (std::size_t{1} << 44) - 1;

/// Whether `s` is a whole decimal number that fits (digits only: no sign, no space); sets `out`.
bool parse_uint(std::string_view s, std::size_t& out);

/// Ranged checks of the key table (config::check_whole_number_in): MiB and KiB whose bytes fit
/// in 64 bits (0 allowed), planned_solve_ms in [1, 3600000], counts up to 2^32.
std::string check_mb_or_zero(const std::string& key, std::string_view v);
std::string check_kb_or_zero(const std::string& key, std::string_view v);
std::string check_solve_ms(const std::string& key, std::string_view v);
std::string check_decay_ms(const std::string& key, std::string_view v);
std::string check_steps_count(const std::string& key, std::string_view v);
std::string check_positive_count(const std::string& key, std::string_view v);

/// One "KEY:VALUE" entry of a bracketed list, both sides trimmed.
struct ListEntry {
  std::string_view key;
  std::string_view value;
  bool last = false;  ///< no comma follows it
};

/// The entries of a "[KEY:VALUE,...]" list, given its inside (`body`, without the brackets), in
/// order. An entry without ':' (an empty body is one empty entry) throws InvalidInput
/// "ENTRY_WORD 'TEXT' is not FORM".
std::vector<ListEntry> list_entries(std::string_view body, std::string_view entry_word,
                                    std::string_view form);

/// Throws InvalidInput "config: KEY: WHAT".
[[noreturn]] void bad(const std::string& key, const std::string& what);

/// The seed's table of what deployments budget per model family (model_type:cnn, ...).
/// The preset named `name` (plan/presets.hpp); bad("model_type", ...) when there is none.
const plan::FamilyPool& preset(const std::string& name);

/// Prints `text` on stderr once per process (each distinct text once).
void warn_once(const std::string& text);
/// The one-line warning of a device without expandable segments, naming the device, the reason
/// and `what` was built instead.
std::string fallback_warning(const std::string& device, const std::string& reason,
                             const std::string& what);

/// build() for a Config with pools (pools.cpp).
Built build_pools(const Config& config, device::DevicePtr base);

}  // namespace modelmem::config::detail
