// Constant folding of the small integer (and scalar float) tensors that compute reshape targets
// in models exported with dynamic axes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, plus
// arithmetic). Once the symbolic dims are bound these values are constants; ONNX 1.12's data
// propagation does not follow such chains, so shape inference cannot settle without this.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstddef>
#include <map>
#include <set>
#include <string>

namespace modelmem::model::detail {

/// Largest tensor (in elements) this pass computes; bigger values are left to the runtime.
inline constexpr std::size_t kMaxFoldElements = 1 << 16;

/// Evaluates every node whose inputs are known (initializers with data, Constant nodes, Shape of
/// a tensor with a static shape in the graph's inputs/value_info/outputs), replaces it by an
/// initializer per output and removes it. The names of the new initializers are added to
/// `folded`. `opsets` maps domain ("" for ONNX) to version. Returns the number of nodes removed.
std::size_t fold_constants(onnx::GraphProto& graph, const std::map<std::string, int>& opsets,
                           std::set<std::string>& folded);

}  // namespace modelmem::model::detail
