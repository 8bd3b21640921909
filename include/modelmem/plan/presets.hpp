// The static pool presets per model family (`model_type:cnn|transformer|gan`, the seed's): a
// pool size and a safety factor. One table, read by the configuration (model_type sizes a
// static pool) and by the plan report (model::seed_preset, compared with the plan).
#pragma once

#include <cstddef>
#include <string_view>

namespace modelmem::plan {

struct FamilyPool {
  std::string_view family;   ///< "cnn", "transformer" or "gan"
  std::size_t pool_mib = 0;  ///< the pool before the safety factor
  double factor = 1.0;       ///< the default safety factor
};

inline constexpr FamilyPool kFamilyPools[] = {
    {"cnn", 512, 1.2}, {"transformer", 1024, 1.5}, {"gan", 2048, 1.3}};

/// The preset of `family`, or nullptr when there is none.
constexpr const FamilyPool* find_family_pool(std::string_view family) noexcept {
  for (const FamilyPool& p : kFamilyPools)
    if (p.family == family) return &p;
  return nullptr;
}

}  // namespace modelmem::plan
