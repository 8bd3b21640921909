// Model families (model/family.hpp): the static pool presets and the family guessed from the
// operators.
#include "modelmem/model/family.hpp"

#include <fmt/format.h>

#include <map>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/presets.hpp"

namespace modelmem::model {
std::string guess_family(const Graph& graph) {
  std::map<std::string, std::size_t> ops;
  for (const auto& n : graph.nodes) ++ops[n.op_type];
  if (ops["ConvTranspose"] > 0) return "gan";
  if (ops["Softmax"] > 0 && ops["MatMul"] + ops["Gemm"] >= ops["Conv"]) return "transformer";
  if (ops["Conv"] > 0) return "cnn";
  return "transformer";
}

FamilyPreset seed_preset(const std::string& family) {
  const plan::FamilyPool* p = plan::find_family_pool(family);
  if (p == nullptr)
    throw InvalidInput(fmt::format("unknown model family '{}' (cnn, transformer, gan)", family));
  return {family, p->pool_mib * kMiB, p->factor};
}

}  // namespace modelmem::model
