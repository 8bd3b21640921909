// The kernels of the constant-folding pass, one per folded operator (model/fold_value.hpp):
// numpy broadcasting, integer arithmetic checked for overflow, shape-vector Slice/Gather/Concat.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/fold_value.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model::detail {

using onnx::TensorProto;

namespace {

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
  if (op == "Mod" || op == "FMod") {  // Mod: the divisor's sign (Python); FMod: the dividend's
    if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1)) return std::nullopt;
    r = a % b;
    if (op == "Mod" && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
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
  if (op == "FMod") return std::fmod(a, b);
  if (op == "Mod") return a - b * std::floor(a / b);
  return std::nullopt;
}

bool is_comparison(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater";
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

// Elements between one index and the next along each axis of a row-major tensor of `dims`.
Dims row_major_strides(const Dims& dims) {
  Dims stride(dims.size(), 1);
  for (std::size_t d = dims.size(); d-- > 1;) stride[d - 1] = stride[d] * dims[d];
  return stride;
}

// The tensor of `dims` whose element at index i is data's element at
// base + sum over d of i[d] * walk[d] (a slice, a transpose: a strided view of `data`, copied).
// The caller has checked that every such element lies inside `data`.
Value gather_strided(const Value& data, const Dims& dims, std::int64_t base, const Dims& walk) {
  Value r;
  r.dtype = data.dtype;
  r.dims = dims;
  const std::size_t n = element_count(dims).value_or(0);
  const std::size_t rank = dims.size();
  Dims idx(rank, 0);
  std::int64_t src = base;  // kept equal to base + sum of idx[d] * walk[d]
  for (std::size_t k = 0; k < n; ++k) {
    if (data.is_real()) {
      r.reals.push_back(data.reals[static_cast<std::size_t>(src)]);
    } else {
      r.ints.push_back(data.ints[static_cast<std::size_t>(src)]);
    }
    for (std::size_t d = rank; d-- > 0;) {
      src += walk[d];
      if (++idx[d] < dims[d]) break;
      src -= walk[d] * idx[d];
      idx[d] = 0;
    }
  }
  return r;
}

}  // namespace

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
    const bool arithmetic = op == "Add" || op == "Sub" || op == "Mul";
    // ONNX's own data propagation would wrap such a value, and a shape computed from it could
    // come out as 0: a tensor silently dropped from the plan. The caller names the node.
    if (!x && arithmetic)
      throw InvalidInput(std::to_string(a.ints[ma[i]]) + " " + op + " " +
                         std::to_string(b.ints[mb[i]]) + " overflows 64 bits");
    if (!x) return std::nullopt;
    if (r.dtype == TensorProto::INT32 && (*x > std::numeric_limits<std::int32_t>::max() ||
                                          *x < std::numeric_limits<std::int32_t>::min())) {
      if (arithmetic)
        throw InvalidInput(std::to_string(a.ints[ma[i]]) + " " + op + " " +
                           std::to_string(b.ints[mb[i]]) + " overflows int32");
      return std::nullopt;
    }
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

// Slice along the given axes of a value of any rank (numpy's clamping of starts and ends).
std::optional<Value> slice(const Value& data, const Dims& starts, const Dims& ends,
                           const std::optional<Dims>& axes, const std::optional<Dims>& steps) {
  const std::size_t rank = data.dims.size();
  if (rank == 0 || starts.empty() || starts.size() != ends.size()) return std::nullopt;
  if ((axes && axes->size() != starts.size()) || (steps && steps->size() != starts.size()))
    return std::nullopt;
  auto clampi = [](std::int64_t x, std::int64_t lo, std::int64_t hi) {
    return std::max(lo, std::min(x, hi));
  };
  Dims first(rank, 0), step(rank, 1), dims = data.dims;
  std::vector<bool> seen(rank, false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    auto ax = norm_axis(axes ? (*axes)[i] : static_cast<std::int64_t>(i), rank);
    if (!ax || seen[*ax]) return std::nullopt;
    seen[*ax] = true;
    const std::int64_t st = steps ? (*steps)[i] : 1, len = data.dims[*ax];
    if (st == 0 || st == std::numeric_limits<std::int64_t>::min()) return std::nullopt;
    std::int64_t start = starts[i], end = ends[i];
    if (start < 0) start = start < -len ? -len - 1 : start + len;
    if (end < 0) end = end < -len ? -len - 1 : end + len;
    if (st > 0) {
      start = clampi(start, 0, len);
      end = clampi(end, 0, len);
    } else {
      start = clampi(start, -1, len - 1);
      end = clampi(end, -1, len - 1);
    }
    const std::int64_t span = st > 0 ? end - start : start - end, a = st > 0 ? st : -st;
    first[*ax] = start;
    step[*ax] = st;
    dims[*ax] = span > 0 ? (span + a - 1) / a : 0;
  }
  auto n = element_count(dims);
  if (!n) return std::nullopt;
  const Dims stride = row_major_strides(data.dims);
  std::int64_t base = 0;
  Dims walk(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    base += first[d] * stride[d];
    walk[d] = step[d] * stride[d];
  }
  return gather_strided(data, dims, base, walk);
}

std::optional<Value> transpose(const Value& data, const std::optional<Dims>& perm) {
  const std::size_t rank = data.dims.size();
  Dims p(rank);
  for (std::size_t i = 0; i < rank; ++i) p[i] = static_cast<std::int64_t>(rank - 1 - i);
  if (perm) {
    if (perm->size() != rank) return std::nullopt;
    p = *perm;
  }
  std::vector<bool> seen(rank, false);
  for (auto& a : p) {
    auto ax = norm_axis(a, rank);
    if (!ax || seen[*ax]) return std::nullopt;
    seen[*ax] = true;
    a = *ax;
  }
  const Dims stride = row_major_strides(data.dims);
  Dims dims(rank), walk(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    dims[d] = data.dims[p[d]];
    walk[d] = stride[p[d]];
  }
  return gather_strided(data, dims, 0, walk);
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

}  // namespace modelmem::model::detail
