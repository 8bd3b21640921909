// Values of the constant-folding pass and their conversion from and to ONNX protos
// (model/fold_value.hpp).
#include <cstring>

#include "model/fold_value.hpp"

namespace modelmem::model::detail {

using onnx::TensorProto;

bool foldable_type(std::int32_t t) {
  return t == TensorProto::INT64 || t == TensorProto::INT32 || t == TensorProto::BOOL ||
         t == TensorProto::FLOAT || t == TensorProto::DOUBLE;
}

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

namespace {

template <typename T>
bool read_raw(const std::string& raw, std::size_t n, std::vector<T>& out) {
  if (raw.size() != n * sizeof(T)) return false;
  out.resize(n);
  if (n != 0) std::memcpy(out.data(), raw.data(), raw.size());
  return true;
}

}  // namespace

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

Value make_ints(Dims dims, std::vector<std::int64_t> ints, std::int32_t dtype) {
  Value v;
  v.dtype = dtype;
  v.dims = std::move(dims);
  v.ints = std::move(ints);
  return v;
}

}  // namespace modelmem::model::detail
