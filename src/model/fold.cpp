#include "model/fold.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

namespace modelmem::model::detail {
namespace {

using onnx::TensorProto;
using Dims = std::vector<std::int64_t>;

// A small tensor value. Integer and boolean types keep exact int64 values (Slice uses INT64_MAX
// as "to the end", which a double cannot hold); float types use doubles.
struct Value {
  std::int32_t dtype = TensorProto::INT64;
  Dims dims;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;

  bool is_real() const { return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE; }
  std::size_t count() const { return is_real() ? reals.size() : ints.size(); }
  std::int64_t int_at(std::size_t i) const {
    return is_real() ? static_cast<std::int64_t>(reals[i]) : ints[i];
  }
  double real_at(std::size_t i) const {
    return is_real() ? reals[i] : static_cast<double>(ints[i]);
  }
};

bool foldable_type(std::int32_t t) {
  return t == TensorProto::INT64 || t == TensorProto::INT32 || t == TensorProto::BOOL ||
         t == TensorProto::FLOAT || t == TensorProto::DOUBLE;
}

// Element count of dims, nullopt when negative, overflowing or above kMaxFoldElements.
std::optional<std::size_t> element_count(const Dims& dims) {
  std::size_t n = 1;
  for (std::int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > kMaxFoldElements / static_cast<std::size_t>(d) + 1) return std::nullopt;
    n *= static_cast<std::size_t>(d);
  }
  if (n > kMaxFoldElements) return std::nullopt;
  return n;
}

template <typename T>
bool read_raw(const std::string& raw, std::size_t n, std::vector<T>& out) {
  if (raw.size() != n * sizeof(T)) return false;
  out.resize(n);
  if (n != 0) std::memcpy(out.data(), raw.data(), raw.size());
  return true;
}

std::optional<Value> from_tensor(const TensorProto& t) {
  if (!foldable_type(t.data_type())) return std::nullopt;
  if (t.has_data_location() && t.data_location() == TensorProto::EXTERNAL) return std::nullopt;
  Value v;
  v.dtype = t.data_type();
  v.dims.assign(t.dims().begin(), t.dims().end());
  auto n = element_count(v.dims);
  if (!n) return std::nullopt;
  const bool raw = t.has_raw_data();
  switch (v.dtype) {
    case TensorProto::INT64:
      if (raw) return read_raw(t.raw_data(), *n, v.ints) ? std::optional(v) : std::nullopt;
      v.ints.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case TensorProto::INT32: {
      std::vector<std::int32_t> tmp;
      if (raw) {
        if (!read_raw(t.raw_data(), *n, tmp)) return std::nullopt;
      } else {
        tmp.assign(t.int32_data().begin(), t.int32_data().end());
      }
      v.ints.assign(tmp.begin(), tmp.end());
      break;
    }
    case TensorProto::BOOL: {
      if (raw) {
        if (t.raw_data().size() != *n) return std::nullopt;
        for (char c : t.raw_data()) v.ints.push_back(c != 0);
      } else {
        for (auto x : t.int32_data()) v.ints.push_back(x != 0);
      }
      break;
    }
    case TensorProto::FLOAT: {
      std::vector<float> tmp;
      if (raw) {
        if (!read_raw(t.raw_data(), *n, tmp)) return std::nullopt;
      } else {
        tmp.assign(t.float_data().begin(), t.float_data().end());
      }
      v.reals.assign(tmp.begin(), tmp.end());
      break;
    }
    case TensorProto::DOUBLE:
      if (raw) return read_raw(t.raw_data(), *n, v.reals) ? std::optional(v) : std::nullopt;
      v.reals.assign(t.double_data().begin(), t.double_data().end());
      break;
  }
  if (v.count() != *n) return std::nullopt;  // graph-only initializer, or malformed data
  return v;
}

TensorProto to_tensor(const Value& v, const std::string& name) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(v.dtype);
  for (auto d : v.dims) t.add_dims(d);
  switch (v.dtype) {
    case TensorProto::INT64:
      for (auto x : v.ints) t.add_int64_data(x);
      break;
    case TensorProto::INT32:
    case TensorProto::BOOL:
      for (auto x : v.ints) t.add_int32_data(static_cast<std::int32_t>(x));
      break;
    case TensorProto::FLOAT:
      for (auto x : v.reals) t.add_float_data(static_cast<float>(x));
      break;
    default:
      for (auto x : v.reals) t.add_double_data(x);
      break;
  }
  return t;
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& node, const char* name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::int64_t int_attribute(const onnx::NodeProto& node, const char* name, std::int64_t dflt) {
  const auto* a = attribute(node, name);
  return a ? a->i() : dflt;
}

std::optional<Dims> ints_attribute(const onnx::NodeProto& node, const char* name) {
  const auto* a = attribute(node, name);
  if (!a) return std::nullopt;
  return Dims(a->ints().begin(), a->ints().end());
}

// Value of a Constant node's attribute (value, value_int(s), value_float(s)).
std::optional<Value> constant_value(const onnx::NodeProto& node) {
  if (const auto* a = attribute(node, "value")) return from_tensor(a->t());
  Value v;
  if (const auto* a = attribute(node, "value_int")) {
    v.ints = {a->i()};
  } else if (const auto* a = attribute(node, "value_ints")) {
    v.ints.assign(a->ints().begin(), a->ints().end());
    v.dims = {static_cast<std::int64_t>(v.ints.size())};
  } else if (const auto* a = attribute(node, "value_float")) {
    v.dtype = TensorProto::FLOAT;
    v.reals = {a->f()};
  } else if (const auto* a = attribute(node, "value_floats")) {
    v.dtype = TensorProto::FLOAT;
    v.reals.assign(a->floats().begin(), a->floats().end());
    v.dims = {static_cast<std::int64_t>(v.reals.size())};
  } else {
    return std::nullopt;
  }
  return v;
}

Value make_ints(Dims dims, std::vector<std::int64_t> ints,
                std::int32_t dtype = TensorProto::INT64) {
  Value v;
  v.dtype = dtype;
  v.dims = std::move(dims);
  v.ints = std::move(ints);
  return v;
}

// Numpy-style broadcast of several shapes; nullopt when incompatible.
std::optional<Dims> broadcast_dims(const std::vector<const Dims*>& shapes) {
  std::size_t rank = 0;
  for (auto* s : shapes) rank = std::max(rank, s->size());
  Dims out(rank, 1);
  for (auto* s : shapes) {
    for (std::size_t i = 0; i < s->size(); ++i) {
      std::size_t o = rank - s->size() + i;
      std::int64_t d = (*s)[i];
      if (d == 1) continue;
      if (out[o] == 1) {
        out[o] = d;
      } else if (out[o] != d) {
        return std::nullopt;
      }
    }
  }
  return out;
}

// For each element of `out` (row-major), the index of the element of `in` it reads.
std::vector<std::size_t> broadcast_map(const Dims& out, const Dims& in, std::size_t count) {
  std::vector<std::size_t> map(count);
  const std::size_t rank = out.size();
  Dims stride(rank, 0);
  std::int64_t s = 1;
  for (std::size_t i = in.size(); i-- > 0;) {
    std::size_t o = rank - in.size() + i;
    stride[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  Dims idx(rank, 0);
  for (std::size_t k = 0; k < count; ++k) {
    std::int64_t src = 0;
    for (std::size_t i = 0; i < rank; ++i) src += idx[i] * stride[i];
    map[k] = static_cast<std::size_t>(src);
    for (std::size_t i = rank; i-- > 0;) {
      if (++idx[i] < out[i]) break;
      idx[i] = 0;
    }
  }
  return map;
}

std::optional<std::int64_t> int_op(const std::string& op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (op == "Add") return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional(r);
  if (op == "Sub") return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional(r);
  if (op == "Mul") return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional(r);
  if (op == "Div") {
    if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1)) return std::nullopt;
    return a / b;
  }
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "And") return a && b;
  if (op == "Or") return a || b;
  return std::nullopt;
}

std::optional<double> real_op(const std::string& op, double a, double b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Pow") return std::pow(a, b);
  return std::nullopt;
}

bool is_comparison(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater";
}

std::optional<Value> binary(const std::string& op, const Value& a, const Value& b) {
  if (a.dtype != b.dtype && !(op == "Pow" && a.is_real())) return std::nullopt;
  auto dims = broadcast_dims({&a.dims, &b.dims});
  if (!dims) return std::nullopt;
  auto n = element_count(*dims);
  if (!n) return std::nullopt;
  auto ma = broadcast_map(*dims, a.dims, *n);
  auto mb = broadcast_map(*dims, b.dims, *n);
  Value r;
  r.dims = *dims;
  if (a.is_real()) {
    if (is_comparison(op)) {
      r.dtype = TensorProto::BOOL;
      for (std::size_t i = 0; i < *n; ++i) {
        double x = a.reals[ma[i]], y = b.real_at(mb[i]);
        r.ints.push_back(op == "Equal" ? x == y : op == "Less" ? x < y : x > y);
      }
      return r;
    }
    r.dtype = a.dtype;
    for (std::size_t i = 0; i < *n; ++i) {
      auto x = real_op(op, a.reals[ma[i]], b.real_at(mb[i]));
      if (!x) return std::nullopt;
      r.reals.push_back(*x);
    }
    return r;
  }
  r.dtype = is_comparison(op) ? TensorProto::BOOL : a.dtype;
  for (std::size_t i = 0; i < *n; ++i) {
    auto x = int_op(op, a.ints[ma[i]], b.ints[mb[i]]);
    if (!x) return std::nullopt;
    if (r.dtype == TensorProto::INT32 && (*x > std::numeric_limits<std::int32_t>::max() ||
                                          *x < std::numeric_limits<std::int32_t>::min()))
      return std::nullopt;
    r.ints.push_back(*x);
  }
  return r;
}

std::optional<Value> cast(const Value& v, std::int64_t to) {
  if (!foldable_type(static_cast<std::int32_t>(to))) return std::nullopt;
  Value r;
  r.dtype = static_cast<std::int32_t>(to);
  r.dims = v.dims;
  for (std::size_t i = 0; i < v.count(); ++i) {
    if (r.is_real()) {
      r.reals.push_back(to == TensorProto::FLOAT ? static_cast<float>(v.real_at(i)) : v.real_at(i));
    } else if (v.is_real()) {
      double x = v.reals[i];
      if (!std::isfinite(x) || std::fabs(x) > 9.0e18) return std::nullopt;
      r.ints.push_back(to == TensorProto::BOOL ? x != 0 : static_cast<std::int64_t>(x));
    } else {
      r.ints.push_back(to == TensorProto::BOOL ? v.ints[i] != 0 : v.ints[i]);
    }
  }
  return r;
}

// Normalises an axis against `rank`; nullopt when out of range.
std::optional<std::int64_t> norm_axis(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

std::optional<Value> with_dims(Value v, Dims dims) {
  auto n = element_count(dims);
  if (!n || *n != v.count()) return std::nullopt;
  v.dims = std::move(dims);
  return v;
}

std::optional<Value> unsqueeze(const Value& v, const Dims& axes) {
  const std::size_t rank = v.dims.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (auto a : axes) {
    auto n = norm_axis(a, rank);
    if (!n || inserted[*n]) return std::nullopt;
    inserted[*n] = true;
  }
  Dims dims;
  std::size_t j = 0;
  for (std::size_t i = 0; i < rank; ++i) dims.push_back(inserted[i] ? 1 : v.dims[j++]);
  return with_dims(v, dims);
}

std::optional<Value> squeeze(const Value& v, const std::optional<Dims>& axes) {
  std::vector<bool> drop(v.dims.size(), false);
  if (axes) {
    for (auto a : *axes) {
      auto n = norm_axis(a, v.dims.size());
      if (!n || v.dims[*n] != 1) return std::nullopt;
      drop[*n] = true;
    }
  } else {
    for (std::size_t i = 0; i < v.dims.size(); ++i) drop[i] = v.dims[i] == 1;
  }
  Dims dims;
  for (std::size_t i = 0; i < v.dims.size(); ++i)
    if (!drop[i]) dims.push_back(v.dims[i]);
  return with_dims(v, dims);
}

std::optional<Value> gather(const Value& data, const Value& indices, std::int64_t axis) {
  if (data.dims.size() != 1 || indices.is_real()) return std::nullopt;
  if (!norm_axis(axis, 1)) return std::nullopt;
  const std::int64_t len = data.dims[0];
  Value r;
  r.dtype = data.dtype;
  r.dims = indices.dims;
  for (auto i : indices.ints) {
    if (i < -len || i >= len) return std::nullopt;
    auto k = static_cast<std::size_t>(i < 0 ? i + len : i);
    if (data.is_real()) {
      r.reals.push_back(data.reals[k]);
    } else {
      r.ints.push_back(data.ints[k]);
    }
  }
  return r;
}

std::optional<Value> concat(const std::vector<const Value*>& parts, std::int64_t axis) {
  if (parts.empty()) return std::nullopt;
  const Value& first = *parts[0];
  auto ax = norm_axis(axis, first.dims.size());
  if (!ax) return std::nullopt;
  Dims dims = first.dims;
  dims[*ax] = 0;
  for (auto* p : parts) {
    if (p->dtype != first.dtype || p->dims.size() != first.dims.size()) return std::nullopt;
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (i != static_cast<std::size_t>(*ax) && p->dims[i] != first.dims[i]) return std::nullopt;
    dims[*ax] += p->dims[*ax];
  }
  if (!element_count(dims)) return std::nullopt;
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < static_cast<std::size_t>(*ax); ++i) outer *= first.dims[i];
  for (std::size_t i = *ax + 1; i < dims.size(); ++i) inner *= first.dims[i];
  Value r;
  r.dtype = first.dtype;
  r.dims = dims;
  for (std::size_t o = 0; o < outer; ++o) {
    for (auto* p : parts) {
      std::size_t chunk = static_cast<std::size_t>(p->dims[*ax]) * inner;
      for (std::size_t k = 0; k < chunk; ++k) {
        if (r.is_real()) {
          r.reals.push_back(p->reals[o * chunk + k]);
        } else {
          r.ints.push_back(p->ints[o * chunk + k]);
        }
      }
    }
  }
  return r;
}

// Slice of a 1-D value (the shape-vector case).
std::optional<Value> slice(const Value& data, const Dims& starts, const Dims& ends,
                           const std::optional<Dims>& axes, const std::optional<Dims>& steps) {
  if (data.dims.size() != 1 || starts.size() != 1 || ends.size() != 1) return std::nullopt;
  if (axes && (axes->size() != 1 || !norm_axis((*axes)[0], 1))) return std::nullopt;
  const std::int64_t step = steps ? (steps->size() == 1 ? (*steps)[0] : 0) : 1;
  if (step == 0) return std::nullopt;
  const std::int64_t len = data.dims[0];
  auto clampi = [](std::int64_t x, std::int64_t lo, std::int64_t hi) {
    return std::max(lo, std::min(x, hi));
  };
  std::int64_t start = starts[0], end = ends[0];
  if (start < 0) start = start < -len ? -len - 1 : start + len;
  if (end < 0) end = end < -len ? -len - 1 : end + len;
  if (step > 0) {
    start = clampi(start, 0, len);
    end = clampi(end, 0, len);
  } else {
    start = clampi(start, -1, len - 1);
    end = clampi(end, -1, len - 1);
  }
  Value r;
  r.dtype = data.dtype;
  for (std::int64_t i = start; step > 0 ? i < end : i > end; i += step) {
    if (data.is_real()) {
      r.reals.push_back(data.reals[i]);
    } else {
      r.ints.push_back(data.ints[i]);
    }
  }
  r.dims = {static_cast<std::int64_t>(r.count())};
  return r;
}

std::optional<Value> reshape(const Value& data, const Value& shape, bool allow_zero) {
  if (shape.is_real() || shape.dims.size() != 1) return std::nullopt;
  Dims dims;
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.ints.size(); ++i) {
    std::int64_t d = shape.ints[i];
    if (d == 0 && !allow_zero) {
      if (i >= data.dims.size()) return std::nullopt;
      d = data.dims[i];
    }
    if (d == -1) {
      if (infer >= 0) return std::nullopt;
      infer = static_cast<int>(i);
      dims.push_back(1);
      continue;
    }
    if (d < 0) return std::nullopt;
    known *= d;
    dims.push_back(d);
  }
  if (infer >= 0) {
    if (known == 0 || static_cast<std::int64_t>(data.count()) % known != 0) return std::nullopt;
    dims[infer] = static_cast<std::int64_t>(data.count()) / known;
  }
  return with_dims(data, dims);
}

std::optional<Value> range(const Value& start, const Value& limit, const Value& delta) {
  if (start.count() != 1 || limit.count() != 1 || delta.count() != 1) return std::nullopt;
  Value r;
  r.dtype = start.dtype;
  if (start.is_real()) {
    double s = start.reals[0], l = limit.real_at(0), d = delta.real_at(0);
    if (d == 0 || !std::isfinite(s) || !std::isfinite(l)) return std::nullopt;
    double n = std::max(std::ceil((l - s) / d), 0.0);
    if (n > kMaxFoldElements) return std::nullopt;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) r.reals.push_back(s + i * d);
  } else {
    std::int64_t s = start.ints[0], l = limit.ints[0], d = delta.ints[0];
    if (d == 0) return std::nullopt;
    // Bounded loop: at most kMaxFoldElements values.
    for (std::int64_t x = s; d > 0 ? x < l : x > l; x += d) {
      if (r.ints.size() >= kMaxFoldElements) return std::nullopt;
      r.ints.push_back(x);
      if ((d > 0 && x > std::numeric_limits<std::int64_t>::max() - d) ||
          (d < 0 && x < std::numeric_limits<std::int64_t>::min() - d))
        break;
    }
  }
  r.dims = {static_cast<std::int64_t>(r.count())};
  return r;
}

std::optional<Value> expand(const Value& data, const Value& shape) {
  if (shape.is_real() || shape.dims.size() != 1) return std::nullopt;
  Dims target(shape.ints.begin(), shape.ints.end());
  auto dims = broadcast_dims({&data.dims, &target});
  if (!dims) return std::nullopt;
  auto n = element_count(*dims);
  if (!n) return std::nullopt;
  auto m = broadcast_map(*dims, data.dims, *n);
  Value r;
  r.dtype = data.dtype;
  r.dims = *dims;
  for (std::size_t i = 0; i < *n; ++i) {
    if (data.is_real()) {
      r.reals.push_back(data.reals[m[i]]);
    } else {
      r.ints.push_back(data.ints[m[i]]);
    }
  }
  return r;
}

std::optional<Value> where(const Value& c, const Value& x, const Value& y) {
  if (c.is_real() || x.dtype != y.dtype) return std::nullopt;
  auto dims = broadcast_dims({&c.dims, &x.dims, &y.dims});
  if (!dims) return std::nullopt;
  auto n = element_count(*dims);
  if (!n) return std::nullopt;
  auto mc = broadcast_map(*dims, c.dims, *n);
  auto mx = broadcast_map(*dims, x.dims, *n);
  auto my = broadcast_map(*dims, y.dims, *n);
  Value r;
  r.dtype = x.dtype;
  r.dims = *dims;
  for (std::size_t i = 0; i < *n; ++i) {
    bool pick = c.ints[mc[i]] != 0;
    if (x.is_real()) {
      r.reals.push_back(pick ? x.reals[mx[i]] : y.reals[my[i]]);
    } else {
      r.ints.push_back(pick ? x.ints[mx[i]] : y.ints[my[i]]);
    }
  }
  return r;
}

std::optional<Value> unary(const std::string& op, const Value& v) {
  Value r = v;
  for (std::size_t i = 0; i < v.count(); ++i) {
    if (v.is_real()) {
      double x = v.reals[i];
      if (op == "Neg")
        x = -x;
      else if (op == "Abs")
        x = std::fabs(x);
      else if (op == "Sqrt")
        x = std::sqrt(x);
      else if (op == "Floor")
        x = std::floor(x);
      else if (op == "Ceil")
        x = std::ceil(x);
      else if (op == "Reciprocal")
        x = 1.0 / x;
      else if (op != "Identity")
        return std::nullopt;
      r.reals[i] = x;
    } else {
      std::int64_t x = v.ints[i];
      if (op == "Neg" || op == "Abs") {
        if (x == std::numeric_limits<std::int64_t>::min()) return std::nullopt;
        x = op == "Neg" ? -x : (x < 0 ? -x : x);
      } else if (op == "Not") {
        x = !x;
      } else if (op != "Identity" && op != "Floor" && op != "Ceil") {
        return std::nullopt;
      }
      r.ints[i] = x;
    }
  }
  return r;
}

using ShapeOf = std::function<std::optional<Dims>(const std::string&)>;

// Evaluates one node. `in` holds the known input values (nullptr when unknown or omitted).
std::optional<std::vector<Value>> evaluate(const onnx::NodeProto& node, int opset,
                                           const std::vector<const Value*>& in,
                                           const ShapeOf& shape_of) {
  const std::string& op = node.op_type();
  auto all_known = [&](std::size_t from = 0) {
    for (std::size_t i = from; i < in.size(); ++i)
      if (!in[i] && !node.input(static_cast<int>(i)).empty()) return false;
    return !in.empty();
  };
  auto one = [](std::optional<Value> v) -> std::optional<std::vector<Value>> {
    if (!v) return std::nullopt;
    return std::vector<Value>{std::move(*v)};
  };
  if (op == "Constant") return one(constant_value(node));
  if (op == "Shape" || op == "Size") {
    if (node.input_size() != 1) return std::nullopt;
    auto dims = shape_of(node.input(0));
    if (!dims) return std::nullopt;
    if (op == "Size") {
      std::int64_t n = 1;
      for (auto d : *dims)
        if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
      return one(make_ints({}, {n}));
    }
    auto r = static_cast<std::int64_t>(dims->size());
    std::int64_t start = int_attribute(node, "start", 0), end = int_attribute(node, "end", r);
    if (start < 0) start = std::max<std::int64_t>(start + r, 0);
    if (end < 0) end = std::max<std::int64_t>(end + r, 0);
    start = std::min(start, r);
    end = std::min(end, r);
    std::vector<std::int64_t> vals;
    for (std::int64_t i = start; i < end; ++i) vals.push_back((*dims)[i]);
    return one(make_ints({static_cast<std::int64_t>(vals.size())}, vals));
  }
  if (!all_known()) return std::nullopt;
  if (op == "Identity" || op == "Neg" || op == "Abs" || op == "Sqrt" || op == "Floor" ||
      op == "Ceil" || op == "Reciprocal" || op == "Not")
    return in.size() == 1 ? one(unary(op, *in[0])) : std::nullopt;
  if (op == "Cast")
    return in.size() == 1 ? one(cast(*in[0], int_attribute(node, "to", 0))) : std::nullopt;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" || op == "Less" ||
      op == "Greater" || op == "And" || op == "Or" || op == "Pow" ||
      ((op == "Max" || op == "Min") && in.size() >= 1)) {
    if (in.size() < 2) return in.size() == 1 ? one(*in[0]) : std::nullopt;
    std::optional<Value> acc = binary(op, *in[0], *in[1]);
    for (std::size_t i = 2; acc && i < in.size(); ++i) acc = binary(op, *acc, *in[i]);
    return one(std::move(acc));
  }
  if (op == "Gather") {
    return in.size() == 2 ? one(gather(*in[0], *in[1], int_attribute(node, "axis", 0)))
                          : std::nullopt;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::optional<Dims> axes;
    if (opset >= 13) {
      if (in.size() >= 2 && in[1]) axes = Dims(in[1]->ints.begin(), in[1]->ints.end());
    } else {
      axes = ints_attribute(node, "axes");
    }
    if (op == "Unsqueeze") return axes ? one(unsqueeze(*in[0], *axes)) : std::nullopt;
    return one(squeeze(*in[0], axes));
  }
  if (op == "Concat") return one(concat(in, int_attribute(node, "axis", 0)));
  if (op == "Slice") {
    if (opset < 10) {
      auto starts = ints_attribute(node, "starts"), ends = ints_attribute(node, "ends");
      if (!starts || !ends || in.size() != 1) return std::nullopt;
      return one(slice(*in[0], *starts, *ends, ints_attribute(node, "axes"), std::nullopt));
    }
    if (in.size() < 3) return std::nullopt;
    auto ints_of = [&](std::size_t i) -> std::optional<Dims> {
      if (i >= in.size() || !in[i]) return std::nullopt;
      return Dims(in[i]->ints.begin(), in[i]->ints.end());
    };
    if (in[1]->is_real() || in[2]->is_real()) return std::nullopt;
    return one(slice(*in[0], *ints_of(1), *ints_of(2), ints_of(3), ints_of(4)));
  }
  if (op == "Reshape" && in.size() == 2)
    return one(reshape(*in[0], *in[1], int_attribute(node, "allowzero", 0) != 0));
  if (op == "Range" && in.size() == 3) return one(range(*in[0], *in[1], *in[2]));
  if (op == "Expand" && in.size() == 2) return one(expand(*in[0], *in[1]));
  if (op == "Where" && in.size() == 3) return one(where(*in[0], *in[1], *in[2]));
  if (op == "ConstantOfShape" && in.size() == 1) {
    if (in[0]->is_real()) return std::nullopt;
    Dims dims(in[0]->ints.begin(), in[0]->ints.end());
    auto n = element_count(dims);
    if (!n) return std::nullopt;
    Value fill;
    fill.dtype = TensorProto::FLOAT;
    fill.reals = {0.0};
    if (const auto* a = attribute(node, "value")) {
      auto v = from_tensor(a->t());
      if (!v || v->count() != 1) return std::nullopt;
      fill = *v;
    }
    Value r;
    r.dtype = fill.dtype;
    r.dims = dims;
    if (r.is_real()) {
      r.reals.assign(*n, fill.reals[0]);
    } else {
      r.ints.assign(*n, fill.ints[0]);
    }
    return one(std::move(r));
  }
  return std::nullopt;
}

std::optional<Dims> static_dims(const onnx::TypeProto& type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return std::nullopt;
  Dims dims;
  for (const auto& d : type.tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
    dims.push_back(d.dim_value());
  }
  return dims;
}

}  // namespace

std::size_t fold_constants(onnx::GraphProto& graph, const std::map<std::string, int>& opsets,
                           std::set<std::string>& folded) {
  std::unordered_map<std::string, Value> known;
  std::unordered_map<std::string, Dims> shapes;
  for (const auto& t : graph.initializer()) {
    shapes[t.name()] = Dims(t.dims().begin(), t.dims().end());
    if (auto v = from_tensor(t)) known.emplace(t.name(), std::move(*v));
  }
  auto add_shapes = [&](const auto& infos) {
    for (const auto& vi : infos)
      if (auto d = static_dims(vi.type())) shapes.emplace(vi.name(), std::move(*d));
  };
  add_shapes(graph.input());
  add_shapes(graph.value_info());
  add_shapes(graph.output());
  ShapeOf shape_of = [&](const std::string& name) -> std::optional<Dims> {
    auto it = shapes.find(name);
    if (it == shapes.end()) return std::nullopt;
    return it->second;
  };
  auto opset_of = [&](const std::string& domain) {
    auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
    return it == opsets.end() ? 0 : it->second;
  };

  std::vector<bool> remove(static_cast<std::size_t>(graph.node_size()), false);
  std::vector<TensorProto> added;
  std::size_t count = 0;
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    std::vector<const Value*> in;
    for (const auto& name : node.input()) {
      auto it = known.find(name);
      in.push_back(name.empty() || it == known.end() ? nullptr : &it->second);
    }
    auto out = evaluate(node, opset_of(node.domain()), in, shape_of);
    if (!out && node.op_type() == "Constant" && node.output_size() == 1) {
      // A Constant of a type this pass does not compute with (float16, int8...) still becomes
      // an initializer: its value is fixed, it is no activation.
      if (const auto* a = attribute(node, "value")) {
        TensorProto t = a->t();
        t.set_name(node.output(0));
        added.push_back(std::move(t));
        folded.insert(node.output(0));
        remove[n] = true;
        ++count;
      }
      continue;
    }
    if (!out || static_cast<int>(out->size()) != node.output_size()) continue;
    for (int o = 0; o < node.output_size(); ++o) {
      const std::string& name = node.output(o);
      shapes[name] = (*out)[o].dims;
      added.push_back(to_tensor((*out)[o], name));
      folded.insert(name);
      known[name] = std::move((*out)[o]);
    }
    remove[n] = true;
    ++count;
  }
  if (count == 0) return 0;
  auto* nodes = graph.mutable_node();
  int w = 0;
  for (int r = 0; r < nodes->size(); ++r) {
    if (remove[r]) continue;
    if (w != r) nodes->SwapElements(w, r);
    ++w;
  }
  while (nodes->size() > w) nodes->RemoveLast();
  for (auto& t : added) *graph.add_initializer() = std::move(t);
  // Stale value_info of folded tensors would conflict with nothing, but drop it to keep the
  // graph consistent: a folded tensor is now an initializer.
  auto* vi = graph.mutable_value_info();
  for (int i = vi->size(); i-- > 0;) {
    if (folded.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  }
  return count;
}

}  // namespace modelmem::model::detail
