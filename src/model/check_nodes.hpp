// Checks of one ONNX node made before ONNX's own shape inference sees it (onnx_import.cpp's
// whole-graph passes, fold.cpp's per-node inference). ONNX 1.12's inference functions divide by
// strides, index the kernel by the input's rank and read constant inputs without checking them:
// a hostile model crashes them (SIGFPE, SIGSEGV) or makes them wrap a size to 0. Each check here
// turns such a node into InvalidInput naming the node and the attribute or input. Internal to
// src/model/.
#pragma once

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace modelmem::model::detail {

/// What is known of a node's inputs when it is checked: an input's static dims (nullptr when
/// unknown) and its constant value (nullptr when unknown or not in the file).
struct KnownInputs {
  std::function<const std::vector<std::int64_t>*(const std::string&)> dims;
  std::function<const onnx::TensorProto*(const std::string&)> data;
};

/// "node 'NAME' (OP)", or "node with output 'Y' (OP)" for an unnamed node.
std::string describe(const onnx::NodeProto& node);

/// Throws InvalidInput ("node 'c' (Conv): attribute 'strides' holds 0, ...") when the node's
/// attributes, or its inputs as far as they are known, are out of range for its operator.
void check_node(const onnx::NodeProto& node, const KnownInputs& known);

/// check_node on every node of `g`, with the dims its inputs, value_info, outputs and
/// initializers give and the values of its initializers and Constant nodes.
void check_graph(const onnx::GraphProto& g);

/// The ONNX schemas, with the inference function of every operator check_node knows wrapped:
/// the node is checked with the input types and constants ONNX's inference context holds (a
/// node whose input got its shape earlier in the same pass), and when it fails the check its
/// inference is skipped and the problem kept for this thread (take_problem()); the caller then
/// runs check_graph on the result, which names the node. Thread-safe; one for the process.
const onnx::ISchemaRegistry& checking_registry();
/// The first problem the wrapped inference functions met on this thread since the last call.
std::string take_problem();

/// Initializers whose values are not in the file (a graph-only model, external data), shown to
/// shape inference as graph inputs of their type while this object hides them: ONNX 1.12 reads a
/// constant input's values without checking that they are there (a Range whose start has no
/// data crashed it), and the folding pass must not compute with them either. restore() puts
/// them back in the stored order (the plan lists weights in it), folded constants after them.
class HiddenValues {
 public:
  explicit HiddenValues(onnx::GraphProto& g);
  void restore();

 private:
  onnx::GraphProto& graph_;
  std::vector<std::unique_ptr<onnx::TensorProto>> hidden_;
  std::vector<std::string> order_;
  int added_inputs_ = 0;
};

/// "" when the tensor's data (raw_data, or the typed field of its type) holds as many elements as
/// its dims say, or holds none; else what disagrees. `bytes` is the size its dims give.
std::string data_length_problem(const onnx::TensorProto& t, std::size_t bytes);

/// Bytes per element of an ONNX element type; 0 for string and unknown types.
std::size_t element_size_of(std::int32_t dtype);

/// The field of TensorProto that holds the tensor type's values ("int64_data", ...) and how many
/// it holds.
std::pair<const char*, std::size_t> typed_field(const onnx::TensorProto& t);

/// Whether the tensor's values are in it: embedded data (raw, or the field of its type), or no
/// element at all.
bool has_values(const onnx::TensorProto& t);

}  // namespace modelmem::model::detail
