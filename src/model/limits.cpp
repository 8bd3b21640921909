// The limits a model puts on its dims: tables indexed by positions it computes (a position
// embedding), found once the dims are bound (modelmem/model/plan_model.hpp).
#include <algorithm>

#include "modelmem/model/plan_model.hpp"

namespace modelmem::model {

std::vector<TableLimit> table_limits(const Graph& graph) {
  std::vector<TableLimit> out;
  for (const auto& node : graph.nodes) {
    if (node.op_type != "Gather" || !node.domain.empty() || node.inputs.size() < 2 ||
        node.outputs.empty() || node.inputs[0] < 0 || node.inputs[1] < 0 || node.outputs[0] < 0)
      continue;
    const Tensor& table = graph.tensors[node.inputs[0]];
    const Tensor& indices = graph.tensors[node.inputs[1]];
    const Tensor& result = graph.tensors[node.outputs[0]];
    // Positions the model computed from the bound dims (not the caller's token ids), gathered
    // along the table's rows (axis 0: the output is the indices' shape + one row's shape).
    if (table.kind != TensorKind::kWeight || table.shape.size() < 2 ||
        indices.kind != TensorKind::kConstant || !indices.max_value)
      continue;
    std::vector<std::int64_t> expected = indices.shape;
    expected.insert(expected.end(), table.shape.begin() + 1, table.shape.end());
    if (result.shape != expected) continue;
    out.push_back(
        {table.name, static_cast<std::size_t>(table.shape[0]), node.name, *indices.max_value});
  }
  return out;
}

}  // namespace modelmem::model
