// An ONNX model reduced to what memory planning needs: the nodes in execution order and every
// tensor with its settled static shape, element type and byte size. load_onnx() reads the file
// with Debian's libonnx (protobuf), binds symbolic dims, folds the shape-computing subgraphs of
// dynamic-axis exports to constants and runs ONNX shape inference until every tensor is static.
// Plain value types: no locking, copy freely. Loading is O(nodes x inference passes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace modelmem::model {

enum class TensorKind {
  kInput,       ///< graph input fed by the caller (lives in the arena from the first step)
  kWeight,      ///< initializer of the model (the weights region)
  kConstant,    ///< folded at load time (Constant nodes, shape arithmetic): neither region
  kActivation,  ///< produced by a node
};

struct Tensor {
  std::string name;
  TensorKind kind = TensorKind::kActivation;
  std::int32_t dtype = 0;           ///< ONNX TensorProto::DataType
  std::size_t element_size = 0;     ///< bytes per element
  std::vector<std::int64_t> shape;  ///< static dims, all >= 0
  std::size_t bytes = 0;            ///< element_size x product(shape), overflow-checked
  bool graph_output = false;
  std::optional<std::int64_t> max_value;  ///< a folded integer constant's largest value
  int producer = -1;           ///< index into Graph::nodes, -1 for inputs, weights, constants
  std::vector<int> consumers;  ///< node indices, one entry per use, ascending
};

struct Node {
  std::string name;  ///< the model's node name, or "#index" when it has none
  std::string op_type;
  std::string domain;        ///< "" for the default ONNX domain
  std::vector<int> inputs;   ///< tensor indices, -1 for an omitted optional input
  std::vector<int> outputs;  ///< tensor indices, -1 for an omitted optional output
  /// Transpose's `perm` (empty: the dims reversed, ONNX's default) and Gather's `axis`: what
  /// the eager model needs to follow a view's layout (model/lifetimes.cpp).
  std::vector<std::int64_t> perm;
  std::int64_t axis = 0;
};

struct Graph {
  std::string source;  ///< file name, for messages
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;                   ///< in the model's stored (topological) order
  std::map<std::string, std::int64_t> dims;  ///< the bound symbolic dims
  std::size_t folded_nodes = 0;              ///< nodes replaced by constants at load time
  int inference_passes = 0;

  /// "node 'name' (OpType)" for messages.
  std::string describe_node(int node) const;
  /// Index of the tensor with this name, or -1.
  int find_tensor(std::string_view name) const;
};

struct LoadOptions {
  /// Values for the model's symbolic dims (`--dim batch=8`). Every symbolic dim of a graph input
  /// must be bound; naming a dim the model does not have is an error.
  std::map<std::string, std::int64_t> dims;
  /// Dims of `dims` that the model's inputs do not have are skipped instead of rejected (one
  /// `--dim` list shared by several models). The bound ones are in Graph::dims.
  bool ignore_unknown_dims = false;
};

/// Reads an ONNX model file (a directory or other non-regular file is rejected by name). Weight
/// data may be embedded, in external-data files next to the model (their presence and length are
/// checked, the bytes are not read), or absent (graph-only models). Throws InvalidInput naming the
/// file and the node or tensor for: a file that is not ONNX or is truncated, a cycle, an input
/// nobody produces, an unknown operator, an unbound dim, a shape inference cannot settle, sizes
/// that overflow.
Graph load_onnx(const std::string& path, const LoadOptions& options = {});

/// The same from bytes already in memory (fuzzing, tests). External data is resolved relative
/// to `base_dir`; with an empty base_dir a model that references external data is rejected.
Graph load_onnx_bytes(std::string_view bytes, const std::string& source,
                      const std::string& base_dir, const LoadOptions& options = {});

/// Parses "NAME=VALUE" (VALUE a positive integer) for --dim; throws InvalidInput.
std::pair<std::string, std::int64_t> parse_dim(const std::string& text);

/// Name of an ONNX element type ("float32", "int64", ...), "type N" when unknown.
std::string dtype_name(std::int32_t dtype);

}  // namespace modelmem::model
