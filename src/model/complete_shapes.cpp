// Output shapes ONNX 1.12's inference leaves unknown (model/complete_shapes.hpp).
#include "model/complete_shapes.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>

namespace modelmem::model::detail {

using Dims = std::vector<std::int64_t>;  // as fold_value.hpp

namespace {

// One operand of an equation: its letters in order, '.' standing for the ellipsis.
std::optional<std::string> parse_term(const std::string& term) {
  std::string out;
  for (std::size_t i = 0; i < term.size();) {
    if (term.compare(i, 3, "...") == 0) {
      if (out.find('.') != std::string::npos) return std::nullopt;
      out += '.';
      i += 3;
    } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
      out += term[i++];
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// Numpy's broadcast of `b` into `a` (right-aligned, 1 stretches).
bool broadcast_into(Dims& a, const Dims& b) {
  if (b.size() > a.size()) a.insert(a.begin(), b.size() - a.size(), 1);
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::int64_t& x = a[a.size() - b.size() + i];
    if (b[i] == x || b[i] == 1) continue;
    if (x != 1) return false;
    x = b[i];
  }
  return true;
}

}  // namespace

std::optional<Dims> einsum_dims(const std::string& equation, const std::vector<Dims>& inputs) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const std::size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (std::size_t from = 0;;) {
    const std::size_t comma = lhs.find(',', from);
    auto term = parse_term(lhs.substr(from, comma == std::string::npos ? comma : comma - from));
    if (!term) return std::nullopt;
    terms.push_back(*term);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (terms.size() != inputs.size()) return std::nullopt;
  std::map<char, std::int64_t> size;
  std::map<char, int> uses;
  Dims ellipsis;
  bool has_ellipsis = false;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    const std::string& t = terms[k];
    const Dims& in = inputs[k];
    const bool ell = t.find('.') != std::string::npos;
    const std::size_t letters = t.size() - (ell ? 1 : 0);
    if (ell ? in.size() < letters : in.size() != letters) return std::nullopt;
    const std::size_t ell_rank = in.size() - letters;
    std::size_t d = 0;
    for (char c : t) {
      if (c == '.') {
        has_ellipsis = true;
        if (!broadcast_into(ellipsis, Dims(in.begin() + d, in.begin() + d + ell_rank)))
          return std::nullopt;
        d += ell_rank;
        continue;
      }
      ++uses[c];
      auto [it, fresh] = size.emplace(c, in[d]);
      if (!fresh && it->second != in[d]) {
        if (it->second != 1 && in[d] != 1) return std::nullopt;
        it->second = std::max(it->second, in[d]);
      }
      ++d;
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    auto term = parse_term(eq.substr(arrow + 2));
    if (!term) return std::nullopt;
    out = *term;
  } else {  // implicit: the ellipsis, then the letters used once, in alphabetical order
    if (has_ellipsis) out += '.';
    for (const auto& [c, n] : uses)
      if (n == 1) out += c;
  }
  Dims dims;
  for (char c : out) {
    if (c == '.') {
      dims.insert(dims.end(), ellipsis.begin(), ellipsis.end());
      continue;
    }
    auto it = size.find(c);
    if (it == size.end() || std::count(out.begin(), out.end(), c) != 1) return std::nullopt;
    dims.push_back(it->second);
  }
  return dims;
}

std::size_t complete_shapes(onnx::GraphProto& graph) {
  std::unordered_map<std::string, Dims> shapes;
  std::unordered_map<std::string, std::int32_t> types;
  std::unordered_map<std::string, onnx::ValueInfoProto*> info;  // value_info and outputs
  for (const auto& t : graph.initializer()) {
    shapes[t.name()] = Dims(t.dims().begin(), t.dims().end());
    types[t.name()] = t.data_type();
  }
  auto note = [&](const onnx::ValueInfoProto& vi) {
    if (auto d = static_dims(vi.type())) shapes.emplace(vi.name(), std::move(*d));
    if (vi.type().tensor_type().has_elem_type())
      types.emplace(vi.name(), vi.type().tensor_type().elem_type());
  };
  for (const auto& vi : graph.input()) note(vi);
  for (auto& vi : *graph.mutable_value_info()) {
    info[vi.name()] = &vi;
    note(vi);
  }
  for (auto& vi : *graph.mutable_output()) {
    info[vi.name()] = &vi;
    note(vi);
  }
  std::size_t settled = 0;
  for (const auto& node : graph.node()) {
    if (node.op_type() != "Einsum" || (!node.domain().empty() && node.domain() != "ai.onnx") ||
        node.output_size() != 1 || shapes.count(node.output(0)))
      continue;
    std::string equation;
    for (const auto& a : node.attribute())
      if (a.name() == "equation") equation = a.s();
    std::vector<Dims> in;
    for (const auto& name : node.input()) {
      auto it = shapes.find(name);
      if (it == shapes.end() ||
          std::any_of(it->second.begin(), it->second.end(), [](std::int64_t d) { return d < 0; }))
        break;
      in.push_back(it->second);
    }
    if (in.size() != static_cast<std::size_t>(node.input_size())) continue;
    auto dims = einsum_dims(equation, in);
    if (!dims) continue;
    onnx::ValueInfoProto*& vi = info[node.output(0)];
    if (!vi) {
      vi = graph.add_value_info();
      vi->set_name(node.output(0));
    }
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    if (!tt->has_elem_type() && types.count(node.input(0))) tt->set_elem_type(types[node.input(0)]);
    auto* shape = tt->mutable_shape();
    shape->clear_dim();
    for (auto d : *dims) shape->add_dim()->set_dim_value(d);
    shapes[node.output(0)] = *dims;
    ++settled;
  }
  return settled;
}

std::optional<std::vector<std::int64_t>> static_dims(const onnx::TypeProto& type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return std::nullopt;
  std::vector<std::int64_t> dims;
  for (const auto& d : type.tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
    dims.push_back(d.dim_value());
  }
  return dims;
}

}  // namespace modelmem::model::detail
