// The seed's static pool presets per model family, and the family guessed from the operators.
#pragma once

#include <cstddef>
#include <string>

#include "modelmem/model/graph.hpp"

namespace modelmem::model {

/// The seed's static pool presets: a model family, its pool and safety factor.
struct FamilyPreset {
  std::string family;  ///< "cnn", "transformer" or "gan"
  std::size_t pool_bytes = 0;
  double factor = 1.0;
  std::size_t provisioned() const {
    return static_cast<std::size_t>(static_cast<double>(pool_bytes) * factor);
  }
};
/// Guesses the family from the operators: ConvTranspose -> gan; Softmax with at least as many
/// MatMul/Gemm as Conv -> transformer; Conv -> cnn; otherwise transformer.
std::string guess_family(const Graph& graph);
/// Throws InvalidInput for an unknown family.
FamilyPreset seed_preset(const std::string& family);

}  // namespace modelmem::model
