// Checks of one node before ONNX's shape inference sees it (model/check_nodes.hpp).
#include "model/check_nodes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "model/fold_value.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/graph.hpp"

namespace modelmem::model::detail {
namespace {

using onnx::TensorProto;
using Ints = std::vector<std::int64_t>;

[[noreturn]] void refuse(const onnx::NodeProto& node, const std::string& what) {
  throw InvalidInput(describe(node) + ": " + what);
}

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, const char* name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::string list(const Ints& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

// The input `i`'s name, or "" when the node has no such input.
std::string input_name(const onnx::NodeProto& node, int i) {
  return i < node.input_size() ? node.input(i) : std::string();
}

const Ints* dims_of(const onnx::NodeProto& node, int i, const KnownInputs& known) {
  const std::string name = input_name(node, i);
  return name.empty() || !known.dims ? nullptr : known.dims(name);
}

// The values of a constant input, when the file holds them and this pass computes with them.
std::optional<Value> value_of(const onnx::NodeProto& node, int i, const KnownInputs& known) {
  const std::string name = input_name(node, i);
  const TensorProto* t = name.empty() || !known.data ? nullptr : known.data(name);
  if (t == nullptr || !has_values(*t)) return std::nullopt;
  return from_tensor(*t);
}

// Every value of an INTS attribute at least `least`.
void check_at_least(const onnx::NodeProto& node, const char* name, std::int64_t least,
                    const char* why) {
  const auto* a = find_attribute(node, name);
  if (a == nullptr) return;
  for (int k = 0; k < a->ints_size(); ++k)
    if (a->ints(k) < least)
      refuse(node, fmt::format("attribute '{}' {} holds {} at position {}; {}", name,
                               list(Ints(a->ints().begin(), a->ints().end())), a->ints(k), k, why));
}

// The window's sums in 64 bits, which ONNX makes without a check (a pad of 2^63 - 1 wrapped to a
// small dim): each spatial dim with its pads, and each kernel dim dilated. `kernel` may be empty
// (not known yet).
void check_window_sums(const onnx::NodeProto& node, const Ints& x, const Ints& kernel) {
  const std::size_t spatial = x.size() - 2;
  const auto* pads = find_attribute(node, "pads");
  const auto* dilations = find_attribute(node, "dilations");
  for (std::size_t i = 0; i < spatial; ++i) {
    std::int64_t sum = 0;
    if (pads != nullptr && static_cast<std::size_t>(pads->ints_size()) == 2 * spatial &&
        (__builtin_add_overflow(x[2 + i], pads->ints(static_cast<int>(i)), &sum) ||
         __builtin_add_overflow(sum, pads->ints(static_cast<int>(i + spatial)), &sum)))
      refuse(node, fmt::format("attribute 'pads': dim {} of input '{}' ({}) padded by {} and {} "
                               "overflows 64 bits",
                               2 + i, node.input(0), x[2 + i], pads->ints(static_cast<int>(i)),
                               pads->ints(static_cast<int>(i + spatial))));
    const std::int64_t d =
        dilations != nullptr && static_cast<std::size_t>(dilations->ints_size()) == spatial
            ? dilations->ints(static_cast<int>(i))
            : 1;
    std::int64_t extent = 0;
    if (i < kernel.size() && (__builtin_mul_overflow(kernel[i] - 1, d, &extent) ||
                              __builtin_add_overflow(extent, 1, &extent)))
      refuse(node, fmt::format("attribute 'dilations': kernel dim {} ({}) dilated by {} overflows "
                               "64 bits",
                               i, kernel[i], d));
  }
}

// Conv, ConvTranspose, the pools: attributes that divide, stride or repeat, and the weight's
// rank, which ONNX's inference uses to index the input's dims.
void check_window(const onnx::NodeProto& node, const KnownInputs& known) {
  const std::string& op = node.op_type();
  check_at_least(node, "strides", 1, "strides must be at least 1");
  check_at_least(node, "kernel_shape", 1, "a kernel must be at least 1");
  check_at_least(node, "dilations", 1, "dilations must be at least 1");
  check_at_least(node, "pads", 0, "pads must not be negative");
  check_at_least(node, "output_padding", 0, "output_padding must not be negative");
  check_at_least(node, "output_shape", 0, "an output dim must not be negative");
  std::int64_t group = 1;
  if (const auto* g = find_attribute(node, "group")) {
    group = g->i();
    if (group < 1)
      refuse(node, fmt::format("attribute 'group' is {}; it must be at least 1", group));
  }
  const Ints* x = dims_of(node, 0, known);
  if (op == "MaxUnpool") {  // ONNX reads the channels from the indices' dim 1
    const Ints* indices = dims_of(node, 1, known);
    if (indices != nullptr &&
        (indices->size() < 2 || (x != nullptr && indices->size() != x->size())))
      refuse(node,
             fmt::format("indices '{}' have rank {}; they must have the rank of input '{}'{}, "
                         "at least 2",
                         node.input(1), indices->size(), node.input(0),
                         x != nullptr ? fmt::format(" ({})", x->size()) : std::string()));
  }
  if (x == nullptr) return;
  const auto spatial = static_cast<std::int64_t>(x->size()) - 2;
  for (const char* name : {"strides", "kernel_shape", "dilations", "pads", "output_padding"}) {
    const auto* a = find_attribute(node, name);
    if (a == nullptr || spatial < 0) continue;
    const std::int64_t want = std::string(name) == "pads" ? 2 * spatial : spatial;
    if (a->ints_size() != want)
      refuse(node, fmt::format("attribute '{}' has {} values; input '{}' of rank {} needs {}", name,
                               a->ints_size(), node.input(0), x->size(), want));
  }
  if (spatial >= 0) {
    const auto* k = find_attribute(node, "kernel_shape");
    check_window_sums(node, *x, k != nullptr ? Ints(k->ints().begin(), k->ints().end()) : Ints{});
  }
  const int w_index = op == "QLinearConv" ? 3 : 1;
  const bool has_weight =
      op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv";
  const Ints* w = has_weight ? dims_of(node, w_index, known) : nullptr;
  if (w == nullptr) return;
  const std::string w_name = node.input(w_index);
  if (w->size() != x->size())
    refuse(node,
           fmt::format("weight '{}' has rank {} {}, input '{}' rank {} {}: they must be equal",
                       w_name, w->size(), list(*w), node.input(0), x->size(), list(*x)));
  for (std::size_t d = 2; d < w->size(); ++d)
    if ((*w)[d] < 1)
      refuse(node, fmt::format("weight '{}' {}: kernel dim {} is {}; a kernel must be at least 1",
                               w_name, list(*w), d, (*w)[d]));
  if (x->size() < 2) return;  // ONNX's inference refuses a window over fewer than 2 dims
  check_window_sums(node, *x, Ints(w->begin() + 2, w->end()));
  const std::int64_t channels = (*x)[1];
  if (channels > 0 && channels % group != 0)
    refuse(node, fmt::format("attribute 'group' ({}) does not divide the {} channels of input '{}'",
                             group, channels, node.input(0)));
  if (op == "ConvTranspose") {
    if ((*w)[0] != channels)
      refuse(node, fmt::format("weight '{}' {} has {} input channels, input '{}' has {}", w_name,
                               list(*w), (*w)[0], node.input(0), channels));
    return;
  }
  std::int64_t per_group = 0;
  if ((*w)[0] % group != 0)
    refuse(node, fmt::format("attribute 'group' ({}) does not divide the {} output channels of "
                             "weight '{}'",
                             group, (*w)[0], w_name));
  if (__builtin_mul_overflow((*w)[1], group, &per_group) || per_group != channels)
    refuse(node, fmt::format("weight '{}' {}: {} channels per group x group {} is not the {} "
                             "channels of input '{}'",
                             w_name, list(*w), (*w)[1], group, channels, node.input(0)));
}

// Range: its length, (limit - start) / delta rounded up, must be a 64-bit dim.
void check_range(const onnx::NodeProto& node, const KnownInputs& known) {
  std::optional<Value> v[3];
  const char* names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    v[i] = value_of(node, i, known);
    if (!v[i]) return;
    if (v[i]->count() != 1)
      refuse(node, fmt::format("input '{}' ({}) holds {} values; Range takes a scalar",
                               node.input(i), names[i], v[i]->count()));
  }
  const long double start = v[0]->real_at(0), limit = v[1]->real_at(0), delta = v[2]->real_at(0);
  if (delta == 0) refuse(node, fmt::format("input '{}' (delta) is 0", node.input(2)));
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    refuse(node, "start, limit and delta must be finite");
  const long double n = std::ceil((limit - start) / delta);
  if (n > static_cast<long double>(std::numeric_limits<std::int64_t>::max() / 16))
    refuse(node, fmt::format("start {:.6g}, limit {:.6g} and delta {:.6g} make {:.3g} elements, "
                             "more than a tensor can hold (2^59)",
                             static_cast<double>(start), static_cast<double>(limit),
                             static_cast<double>(delta), static_cast<double>(n)));
}

// A shape given as a constant input (Expand, ConstantOfShape, Reshape): no negative dim (but
// Reshape's -1), and a product that fits 64 bits.
void check_shape_input(const onnx::NodeProto& node, int i, const KnownInputs& known) {
  const std::optional<Value> v = value_of(node, i, known);
  if (!v) return;
  if (v->is_real()) refuse(node, fmt::format("shape input '{}' is not integer", node.input(i)));
  const bool reshape = node.op_type() == "Reshape";
  const auto* allowzero = reshape ? find_attribute(node, "allowzero") : nullptr;
  if (allowzero != nullptr && allowzero->i() != 0 &&
      std::count(v->ints.begin(), v->ints.end(), 0) > 0 &&
      std::count(v->ints.begin(), v->ints.end(), -1) > 0)
    refuse(node, fmt::format("shape input '{}' {} holds both 0 and -1 under allowzero",
                             node.input(i), list(v->ints)));
  std::int64_t product = 1;
  int inferred = 0;
  for (std::size_t k = 0; k < v->ints.size(); ++k) {
    const std::int64_t d = v->ints[k];
    if (reshape && d == -1) {
      if (++inferred > 1)
        refuse(node, fmt::format("shape input '{}' {} has more than one -1", node.input(i),
                                 list(v->ints)));
      continue;
    }
    if (d < 0)
      refuse(node, fmt::format("shape input '{}' {} holds the negative dim {}", node.input(i),
                               list(v->ints), d));
    if (d > 0 && __builtin_mul_overflow(product, d, &product))
      refuse(node, fmt::format("shape input '{}' {}: the element count overflows 64 bits",
                               node.input(i), list(v->ints)));
  }
}

// Tile: every repeat at least 0, and each dim times its repeat fits 64 bits.
void check_tile(const onnx::NodeProto& node, const KnownInputs& known) {
  const std::optional<Value> r = value_of(node, 1, known);
  if (!r) return;
  if (r->is_real()) refuse(node, fmt::format("input '{}' (repeats) is not integer", node.input(1)));
  for (std::size_t k = 0; k < r->ints.size(); ++k)
    if (r->ints[k] < 0)
      refuse(node, fmt::format("input '{}' (repeats) {} holds {}; a repeat must not be negative",
                               node.input(1), list(r->ints), r->ints[k]));
  const Ints* x = dims_of(node, 0, known);
  if (x == nullptr) return;
  if (r->ints.size() != x->size())
    refuse(node, fmt::format("input '{}' (repeats) has {} values, input '{}' rank {}",
                             node.input(1), r->ints.size(), node.input(0), x->size()));
  for (std::size_t k = 0; k < x->size(); ++k) {
    std::int64_t out = 0;
    if (__builtin_mul_overflow((*x)[k], r->ints[k], &out))
      refuse(node, fmt::format("dim {} of input '{}' ({}) x repeat {} overflows 64 bits", k,
                               node.input(0), (*x)[k], r->ints[k]));
  }
}

// Pad: each dim with its pads (from the input since opset 11, else the attribute) fits 64 bits.
void check_pad(const onnx::NodeProto& node, const KnownInputs& known) {
  const Ints* x = dims_of(node, 0, known);
  if (x == nullptr) return;
  Ints pads;
  std::string from = "attribute 'pads'";
  if (const auto* a = find_attribute(node, "pads")) {
    pads.assign(a->ints().begin(), a->ints().end());
  } else if (const std::optional<Value> v = value_of(node, 1, known); v && !v->is_real()) {
    pads = v->ints;
    from = fmt::format("input '{}' (pads)", node.input(1));
  }
  if (pads.size() != 2 * x->size()) return;  // ONNX's inference names a wrong count
  for (std::size_t k = 0; k < x->size(); ++k) {
    std::int64_t sum = 0;
    if (__builtin_add_overflow((*x)[k], pads[k], &sum) ||
        __builtin_add_overflow(sum, pads[k + x->size()], &sum))
      refuse(node, fmt::format("{}: dim {} of input '{}' ({}) padded by {} and {} overflows 64 "
                               "bits",
                               from, k, node.input(0), (*x)[k], pads[k], pads[k + x->size()]));
  }
}

// Concat: the output's dim along the axis, the sum of the inputs', fits 64 bits, and 31: ONNX
// 1.12 adds the dims in an `int` (2 x 2^40 gave 0, a tensor silently dropped from the plan).
void check_concat(const onnx::NodeProto& node, const KnownInputs& known) {
  std::int64_t axis = 0;
  if (const auto* a = find_attribute(node, "axis")) axis = a->i();
  std::int64_t sum = 0;
  for (int i = 0; i < node.input_size(); ++i) {
    const Ints* x = dims_of(node, i, known);
    if (x == nullptr) continue;
    const auto rank = static_cast<std::int64_t>(x->size());
    const std::int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) continue;  // ONNX's inference names a bad axis
    if (__builtin_add_overflow(sum, (*x)[static_cast<std::size_t>(a)], &sum))
      refuse(node, fmt::format("the output's dim {} (the sum of the inputs' dims) overflows 64 "
                               "bits",
                               axis));
  }
  if (sum > std::numeric_limits<std::int32_t>::max())
    refuse(node, fmt::format("the output's dim {} (the sum of the inputs' dims) is {}, more than "
                             "ONNX 1.12's shape inference computes (2^31 - 1)",
                             axis, sum));
}

// Resize / Upsample: each dim times its scale must stay a dim.
void check_scales(const onnx::NodeProto& node, const KnownInputs& known) {
  // Resize-10 and Upsample: (X, scales); Resize-11 on: (X, roi, scales, sizes).
  const int index = node.input_size() >= 3 ? 2 : 1;
  const std::optional<Value> s = value_of(node, index, known);
  if (!s || s->count() == 0) return;
  const Ints* x = dims_of(node, 0, known);
  for (std::size_t k = 0; k < s->count(); ++k) {
    const double scale = s->real_at(k);
    if (!std::isfinite(scale) || scale <= 0)
      refuse(node, fmt::format("input '{}' (scales) holds {}; a scale must be positive",
                               node.input(index), scale));
    if (x != nullptr && k < x->size() &&
        static_cast<long double>((*x)[k]) * scale > static_cast<long double>(1ull << 60))
      refuse(node, fmt::format("dim {} of input '{}' ({}) x scale {} is more than a dim can hold",
                               k, node.input(0), (*x)[k], scale));
  }
}

void check_constant(const onnx::NodeProto& node) {
  const auto* a = find_attribute(node, "value");
  if (a == nullptr || !a->has_t()) return;
  const TensorProto& t = a->t();
  std::size_t bytes = 1;
  for (auto d : t.dims()) {
    if (d < 0) refuse(node, fmt::format("attribute 'value' has the negative dim {}", d));
    if (__builtin_mul_overflow(bytes, static_cast<std::size_t>(d), &bytes))
      refuse(node, "attribute 'value': its element count overflows 64 bits");
  }
  const std::size_t elements = bytes;
  if (const std::size_t size = element_size_of(t.data_type()); size != 0)
    if (__builtin_mul_overflow(elements, size, &bytes))
      refuse(node, "attribute 'value': its size overflows 64 bits");
  if (const std::string problem = data_length_problem(t, bytes); !problem.empty())
    refuse(node, "attribute 'value': " + problem);
  if (elements != 0 && !has_values(t))
    refuse(node, fmt::format("attribute 'value' holds no data for its {} elements", elements));
}

}  // namespace

std::size_t element_size_of(std::int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 4;
    case TensorProto::UINT8:
    case TensorProto::INT8:
    case TensorProto::BOOL:
      return 1;
    case TensorProto::UINT16:
    case TensorProto::INT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return 2;
    case TensorProto::INT64:
    case TensorProto::UINT64:
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX64:
      return 8;
    case TensorProto::COMPLEX128:
      return 16;
    default:
      return 0;  // STRING, UNDEFINED, unknown: no fixed size
  }
}

std::string describe(const onnx::NodeProto& node) {
  if (!node.name().empty()) return fmt::format("node '{}' ({})", node.name(), node.op_type());
  return fmt::format("node with output '{}' ({})",
                     node.output_size() > 0 ? node.output(0) : std::string(), node.op_type());
}

// The field of TensorProto that holds a type's values, and how many it holds.
std::pair<const char*, std::size_t> typed_field(const TensorProto& t) {
  auto n = [](int size) { return static_cast<std::size_t>(size); };
  switch (t.data_type()) {
    case TensorProto::FLOAT:
    case TensorProto::COMPLEX64:
      return {"float_data", n(t.float_data_size())};
    case TensorProto::INT64:
      return {"int64_data", n(t.int64_data_size())};
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX128:
      return {"double_data", n(t.double_data_size())};
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      return {"uint64_data", n(t.uint64_data_size())};
    case TensorProto::STRING:
      return {"string_data", n(t.string_data_size())};
    default:  // int32, the narrower integers, bool, float16, bfloat16
      return {"int32_data", n(t.int32_data_size())};
  }
}

bool has_values(const TensorProto& t) {
  if (t.has_data_location() && t.data_location() == TensorProto::EXTERNAL) return false;
  if (t.has_raw_data() || typed_field(t).second > 0) return true;
  for (auto d : t.dims())
    if (d == 0) return true;  // no element: nothing to hold
  return false;
}

std::string data_length_problem(const TensorProto& t, std::size_t bytes) {
  const std::size_t element = element_size_of(t.data_type());
  const std::size_t elements = element == 0 ? 0 : bytes / element;
  const bool complex =
      t.data_type() == TensorProto::COMPLEX64 || t.data_type() == TensorProto::COMPLEX128;
  std::size_t typed = 0;
  for (int n : {t.float_data_size(), t.int32_data_size(), t.int64_data_size(), t.double_data_size(),
                t.uint64_data_size(), t.string_data_size()})
    typed += static_cast<std::size_t>(n);
  std::string dims;
  for (auto d : t.dims()) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  // Each type keeps its values in one field (onnx.proto); ONNX reads that field only, so values
  // in another one are none to it (an int64 Range start in int32_data crashed its inference).
  const auto [field, own] = typed_field(t);
  if (typed != own)
    return fmt::format("{} values in a field {} does not use (its values belong in {})",
                       typed - own, dtype_name(t.data_type()), field);
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes)
      return fmt::format("dims [{}] of {} need {} bytes, but its raw data holds {} bytes", dims,
                         dtype_name(t.data_type()), bytes, t.raw_data().size());
  } else if (typed != 0 && typed != (complex ? 2 * elements : elements)) {
    return fmt::format("dims [{}] hold {} elements, but its data holds {} values", dims, elements,
                       typed);
  }
  return "";
}

void check_node(const onnx::NodeProto& node, const KnownInputs& known) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") return;
  const std::string& op = node.op_type();
  if (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv" ||
      op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "MaxUnpool")
    check_window(node, known);
  else if (op == "Range")
    check_range(node, known);
  else if (op == "Tile")
    check_tile(node, known);
  else if (op == "Expand" || op == "Reshape")
    check_shape_input(node, 1, known);
  else if (op == "ConstantOfShape")
    check_shape_input(node, 0, known);
  else if (op == "Concat")
    check_concat(node, known);
  else if (op == "Pad")
    check_pad(node, known);
  else if (op == "Resize" || op == "Upsample")
    check_scales(node, known);
  else if (op == "Constant")
    check_constant(node);
}

}  // namespace modelmem::model::detail
