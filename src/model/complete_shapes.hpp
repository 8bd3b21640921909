// Output shapes that ONNX 1.12's shape inference leaves unknown although the inputs' shapes are
// known: Einsum (1.12 infers its rank only; MaxViT's attention exports one per head product).
// Run between inference passes (onnx_import.cpp): the next pass carries the settled shapes on.
// Internal to src/model/.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::model::detail {

/// The output dims of Einsum `equation` (spaces allowed, `...` broadcast, implicit output when
/// there is no `->`) for inputs of the given dims; nullopt when they do not fit the equation.
std::optional<std::vector<std::int64_t>> einsum_dims(
    const std::string& equation, const std::vector<std::vector<std::int64_t>>& inputs);

/// The dims of a tensor type whose every dim is a known value >= 0; nullopt otherwise (no shape,
/// a symbolic or missing dim).
std::optional<std::vector<std::int64_t>> static_dims(const onnx::TypeProto& type);

/// Writes the static shape of each Einsum output whose inputs' shapes are static and whose own
/// shape is not, into the graph's value_info. Returns how many it settled.
std::size_t complete_shapes(onnx::GraphProto& graph);

}  // namespace modelmem::model::detail
