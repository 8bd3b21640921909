#include "modelmem/model/family.hpp"

#include <fmt/format.h>

#include <map>

#include "modelmem/core/error.hpp"

namespace modelmem::model {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

}  // namespace

std::string guess_family(const Graph& graph) {
  std::map<std::string, std::size_t> ops;
  for (const auto& n : graph.nodes) ++ops[n.op_type];
  if (ops["ConvTranspose"] > 0) return "gan";
  if (ops["Softmax"] > 0 && ops["MatMul"] + ops["Gemm"] >= ops["Conv"]) return "transformer";
  if (ops["Conv"] > 0) return "cnn";
  return "transformer";
}

FamilyPreset seed_preset(const std::string& family) {
  if (family == "cnn") return {family, 512 * kMiB, 1.2};
  if (family == "transformer") return {family, 1024 * kMiB, 1.5};
  if (family == "gan") return {family, 2048 * kMiB, 1.3};
  throw InvalidInput(fmt::format("unknown model family '{}' (cnn, transformer, gan)", family));
}

}  // namespace modelmem::model
