// The configuration string (`key:value,key:value`, from MODELMEM_ALLOC_CONF or an API call):
// parsing, validation and the table of known keys. Keys that PyTorch's PYTORCH_CUDA_ALLOC_CONF
// also has mean the same thing. The factory that builds an allocator stack from a Config is in
// config/factory.hpp.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace modelmem::config {

/// Parsed configuration: every key with its effective value (defaults filled in) and which keys
/// were given explicitly. Owned by the strategies layer; other layers add keys here.
struct Config {
  std::map<std::string, std::string> values;  ///< effective value of every known key
  std::vector<std::string> explicit_keys;     ///< keys present in the string, in order
  std::string source;                         ///< the string as given

  /// Typed accessors. Throw InvalidInput naming the key when it is unknown, unset or not of
  /// that type. get_size reads a plain integer; get_size_mb reads MiB and returns bytes.
  std::string get(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::size_t get_size(const std::string& key) const;
  std::size_t get_size_mb(const std::string& key) const;
  bool has(const std::string& key) const;  ///< given explicitly
};

/// One row of the key table (the README's table is made from it).
struct ConfigKey {
  std::string name;
  std::string default_value;  ///< "" = unset
  std::string values;         ///< accepted forms
  std::string meaning;
};
/// Every known key, in the order `modelmem config` prints them: the core's, then those other
/// layers registered, in the order they registered them.
const std::vector<ConfigKey>& config_keys();

/// Checks one value of a key: returns it normalised, or throws InvalidInput naming the key.
using KeyCheck = std::string (*)(const std::string& key, std::string_view value);
/// The checks other layers' keys use: a whole number; a whole number > 0.
std::string check_whole_number(const std::string& key, std::string_view value);
std::string check_positive_number(const std::string& key, std::string_view value);
/// A whole number in [min, max] (`unit` names what it counts in the message: "KiB", "ms"), or
/// InvalidInput "config: KEY: ... must be in [min, max]". Every numeric key has such a range, so
/// that what `modelmem config` accepts is what a stack builds from (no product overflows).
std::string check_whole_number_in(const std::string& key, std::string_view value, std::size_t min,
                                  std::size_t max, std::string_view unit = "");

/// A key of a layer above the core (the LD_PRELOAD library's keys live in
/// integrations/preload/preload_keys.cpp): parse_config accepts it, config_keys() lists it.
struct KeyRegistration {
  ConfigKey key;
  KeyCheck check;
};
/// Registers keys (a name already known is left as it is; `check` must not be null). Call before
/// parsing or listing (from a static initialiser or an initialisation function); references from
/// config_keys() taken earlier may be invalidated.
void register_keys(std::span<const KeyRegistration> keys);

/// PyTorch's roundup_power2_divisions forms, a single power of two ("4") or a list of
/// (interval lower edge in MiB, divisions) with ">" for all larger intervals
/// ("[256:1,512:2,>:8]"), as CachingOptions::roundup_power2_divisions (lower edge in bytes).
std::map<std::size_t, unsigned> parse_roundup_power2_divisions(std::string_view text);

/// One entry of the pools key: a pool's name and its quota in bytes.
struct PoolQuota {
  std::string name;
  std::size_t bytes = 0;
};
/// The pools key's value, "[NAME:MiB,...]" (names follow core::valid_pool_name, unique;
/// quotas whole MiB > 0), in order. Throws InvalidInput saying what is wrong.
std::vector<PoolQuota> parse_pools(std::string_view text);
/// Whether `name` may name a pool (core::valid_pool_name, the one rule).
bool valid_pool_name(std::string_view name);

/// Throws InvalidInput naming the key for an unknown key, a malformed value, or a conflicting
/// combination (e.g. expandable_segments:True with max_split_size_mb).
Config parse_config(std::string_view text);

}  // namespace modelmem::config
