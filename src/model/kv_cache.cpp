// KV-cache semantics of decoder exports (modelmem/model/kv_cache.hpp): the pairs are read from
// the declared inputs and outputs of the ONNX file, before any dim is bound, because the
// symbolic names are what tell the batch, the new tokens and the cached tokens apart.
#include "modelmem/model/kv_cache.hpp"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/model/graph.hpp"

namespace modelmem::model {

std::string kv_kind_name(KvKind kind) {
  switch (kind) {
    case KvKind::kFull:
      return "full";
    case KvKind::kSliding:
      return "sliding";
    case KvKind::kLatent:
      return "latent";
    case KvKind::kRecurrent:
      return "recurrent";
  }
  return "?";
}

std::size_t KvCache::bytes_per_token() const {
  std::size_t sum = 0;
  for (const auto& l : layers) sum = checked_add(sum, l.bytes_per_token, "KV bytes per token");
  return sum;
}

std::size_t KvCache::bytes_per_token(KvKind kind) const {
  std::size_t sum = 0;
  for (const auto& l : layers)
    if (l.kind == kind) sum = checked_add(sum, l.bytes_per_token, "KV bytes per token");
  return sum;
}

std::size_t KvCache::bytes_per_sequence() const {
  std::size_t sum = 0;
  for (const auto& l : layers)
    sum = checked_add(sum, l.bytes_per_sequence, "recurrent state bytes");
  return sum;
}

std::size_t KvCache::sequence_bytes(std::int64_t tokens, std::int64_t block_size) const {
  if (tokens < 0 || block_size <= 0) throw InvalidInput("sequence_bytes: bad tokens or block size");
  const std::int64_t blocks = (tokens + block_size - 1) / block_size;
  std::size_t sum = 0;
  for (const auto& l : layers) {
    std::int64_t held = blocks;
    if (l.kind == KvKind::kSliding && l.window > 0)
      held = std::min(blocks, (l.window + block_size - 1) / block_size + 1);
    std::size_t bytes = checked_mul(
        checked_mul(static_cast<std::size_t>(held), static_cast<std::size_t>(block_size), "KV"),
        l.bytes_per_token, "KV bytes of a sequence");
    sum = checked_add(sum, checked_add(bytes, l.bytes_per_sequence, "KV"), "KV bytes");
  }
  return sum;
}

std::map<KvKind, std::pair<std::size_t, std::size_t>> KvCache::by_kind() const {
  std::map<KvKind, std::pair<std::size_t, std::size_t>> out;
  for (const auto& l : layers) {
    auto& e = out[l.kind];
    ++e.first;
    e.second += l.bytes_per_token + l.bytes_per_sequence;
  }
  return out;
}

std::pair<std::string, std::string> parse_kv_pair(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size() ||
      text.find('=', eq + 1) != std::string::npos)
    throw InvalidInput(
        fmt::format("--kv {}: expected INPUT=OUTPUT (a past input and the present output it "
                    "grows into)",
                    text));
  return {text.substr(0, eq), text.substr(eq + 1)};
}

namespace {

DecoderSignature::Pair pair_of(const std::string& input, const std::string& output) {
  DecoderSignature::Pair p;
  p.input = input;
  p.output = output;
  return p;
}

using Dims = std::vector<std::string>;  // per axis: the symbolic name, "" for a fixed dim

Dims dims_of(const onnx::ValueInfoProto& v) {
  Dims out;
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return out;
  for (const auto& d : v.type().tensor_type().shape().dim())
    out.push_back(d.has_dim_param() ? d.dim_param() : std::string());
  return out;
}

// "past_key_values.3.key" -> "present.3.key"; "past_3" -> "present_3"; "" when no rule applies.
std::vector<std::string> present_names(const std::string& past) {
  std::vector<std::string> out;
  for (const char* from : {"past_key_values", "past_key_value", "past"}) {
    auto p = past.find(from);
    if (p == std::string::npos) continue;
    std::string s = past;
    s.replace(p, std::string(from).size(), "present");
    out.push_back(s);
  }
  return out;
}

// The first run of digits in a name ("past_key_values.12.key" -> "12"), or the name itself.
std::string layer_key(const std::string& name) {
  auto b = std::find_if(name.begin(), name.end(), [](char c) { return std::isdigit(c); });
  if (b == name.end()) return name;
  auto e = std::find_if(b, name.end(), [](char c) { return !std::isdigit(c); });
  return std::string(b, e);
}

}  // namespace

DecoderSignature read_decoder_signature(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& explicit_pairs) {
  auto fail = [&](const std::string& what) {
    throw InvalidInput(fmt::format("{}: {}", path, what));
  };
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("no such ONNX file");
  const std::string bytes = core::read_input_file(path, "ONNX", core::kMaxModelInput);
  onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !model.has_graph())
    fail("not an ONNX model");
  const auto& g = model.graph();
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  std::map<std::string, Dims> inputs, outputs;
  std::vector<std::string> input_order;
  for (const auto& v : g.input()) {
    if (inits.count(v.name())) continue;
    inputs[v.name()] = dims_of(v);
    input_order.push_back(v.name());
  }
  for (const auto& v : g.output()) outputs[v.name()] = dims_of(v);

  DecoderSignature sig;
  if (!explicit_pairs.empty()) {
    for (const auto& [i, o] : explicit_pairs) {
      if (!inputs.count(i)) fail(fmt::format("--kv {}={}: the model has no input '{}'", i, o, i));
      if (!outputs.count(o)) fail(fmt::format("--kv {}={}: the model has no output '{}'", i, o, o));
      sig.pairs.push_back(pair_of(i, o));
    }
  } else {
    for (const auto& name : input_order) {
      for (const auto& cand : present_names(name)) {
        if (outputs.count(cand)) {
          sig.pairs.push_back(pair_of(name, cand));
          break;
        }
      }
    }
    if (sig.pairs.empty())
      fail(
          "no KV-cache inputs found (inputs named past... with a matching present... output); "
          "name the pairs with --kv INPUT=OUTPUT");
  }
  std::set<std::string> paired;
  for (const auto& p : sig.pairs) paired.insert(p.input);

  // The batch and new-token dims come from the first input that is not a cache (input_ids).
  const Dims* ids = nullptr;
  for (const auto& name : input_order)
    if (!paired.count(name)) {
      ids = &inputs[name];
      break;
    }
  if (ids == nullptr) fail("every input is a KV-cache input: no token input to read the dims from");
  std::vector<std::string> sym;
  for (const auto& d : *ids)
    if (!d.empty()) sym.push_back(d);
  if (sym.size() < 2)
    fail(
        "the token input needs symbolic batch and sequence dims (export with dynamic axes for "
        "both)");
  sig.batch_dim = sym[0];
  sig.seq_dim = sym[1];

  for (auto& p : sig.pairs) {
    const Dims& d = inputs[p.input];
    for (std::size_t a = 0; a < d.size(); ++a) {
      if (d[a].empty()) continue;
      if (d[a] == sig.batch_dim) {
        p.batch_axis = static_cast<int>(a);
      } else if (p.length_axis < 0) {
        p.length_axis = static_cast<int>(a);
        if (sig.past_dim.empty()) sig.past_dim = d[a];
        if (d[a] != sig.past_dim)
          fail(fmt::format("KV input '{}': its length dim '{}' differs from '{}' of the others",
                           p.input, d[a], sig.past_dim));
      } else {
        fail(fmt::format("KV input '{}': more than one symbolic dim besides the batch '{}'",
                         p.input, sig.batch_dim));
      }
    }
    if (p.batch_axis < 0)
      fail(fmt::format("KV input '{}': no dim named '{}' (the batch of the token input)", p.input,
                       sig.batch_dim));
  }
  std::set<std::string> known = {sig.batch_dim, sig.seq_dim, sig.past_dim};
  for (const auto& name : input_order)
    for (const auto& d : inputs[name])
      if (!d.empty() && !known.count(d)) {
        known.insert(d);
        sig.total_dims.push_back(d);
      }
  return sig;
}

void find_kv_windows(const std::string& path, DecoderSignature& sig,
                     const std::vector<std::int64_t>& probe_pasts) {
  if (sig.past_dim.empty()) return;
  for (std::int64_t past : probe_pasts) {
    if (past <= 0) continue;
    Graph g;
    try {
      LoadOptions load;
      load.dims = step_dims(sig, 1, 1, past);
      g = load_onnx(path, load);
    } catch (const InvalidInput&) {
      continue;  // a graph that cannot take this many cached tokens (a fixed-size mask)
    }
    for (auto& p : sig.pairs) {
      if (p.length_axis < 0 || p.window > 0) continue;
      const int t = g.find_tensor(p.output);
      if (t < 0) continue;
      const auto& shape = g.tensors[t].shape;
      const auto axis = static_cast<std::size_t>(p.length_axis);
      if (axis < shape.size() && shape[axis] > 0 && shape[axis] < past + 1) {
        p.window = shape[axis];
        p.window_source = "graph";
      }
    }
    return;
  }
}

std::pair<std::string, std::int64_t> parse_kv_window(const std::string& text) {
  const auto eq = text.rfind('=');
  const std::string name = eq == std::string::npos ? "" : text.substr(0, eq);
  const std::string number = eq == std::string::npos ? text : text.substr(eq + 1);
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
  if (ec != std::errc() || end != number.data() + number.size() || n <= 0 ||
      (eq != std::string::npos && name.empty()))
    throw InvalidInput(fmt::format(
        "--kv-window {}: expected N (every KV pair) or NAME=N (a KV input or a layer number), N "
        "a positive number of tokens",
        text));
  return {name, n};
}

void apply_kv_windows(DecoderSignature& sig,
                      const std::vector<std::pair<std::string, std::int64_t>>& windows) {
  for (const auto& [name, n] : windows) {
    bool matched = false;
    for (auto& p : sig.pairs) {
      if (!name.empty() && name != p.input && name != layer_key(p.input)) continue;
      matched = true;
      if (p.length_axis < 0)
        throw InvalidInput(fmt::format(
            "--kv-window {}={}: '{}' is a recurrent state (no length dim), not a window",
            name.empty() ? p.input : name, n, p.input));
      p.window = n;
      p.window_source = "--kv-window";
    }
    if (!matched)
      throw InvalidInput(
          fmt::format("--kv-window {}={}: no KV input or layer '{}'", name, n, name));
  }
}

std::map<std::string, std::int64_t> step_dims(const DecoderSignature& sig, std::int64_t batch,
                                              std::int64_t seq, std::int64_t past) {
  std::map<std::string, std::int64_t> dims;
  dims[sig.batch_dim] = batch;
  dims[sig.seq_dim] = seq;
  if (!sig.past_dim.empty()) dims[sig.past_dim] = past;
  for (const auto& t : sig.total_dims) dims[t] = past + seq;
  return dims;
}

void mark_kv_cache(Graph& graph, const DecoderSignature& sig) {
  for (const auto& p : sig.pairs) {
    for (const auto& name : {p.input, p.output}) {
      int t = graph.find_tensor(name);
      if (t < 0) throw InvalidInput(fmt::format("{}: no tensor '{}'", graph.source, name));
      graph.tensors[t].kind = TensorKind::kConstant;
    }
  }
}

KvCache kv_cache_of(const Graph& graph, const DecoderSignature& sig, std::size_t element_size) {
  KvCache kv;
  std::map<std::string, std::size_t> layer_of;
  for (const auto& p : sig.pairs) {
    int t = graph.find_tensor(p.input);
    if (t < 0) throw InvalidInput(fmt::format("{}: no tensor '{}'", graph.source, p.input));
    const Tensor& tensor = graph.tensors[t];
    std::size_t bytes = tensor.bytes;  // batch 1, past 1: one token of one sequence
    if (element_size != 0 && tensor.element_size != 0)
      bytes = bytes / tensor.element_size * element_size;
    if (kv.layers.empty()) kv.element_size = element_size ? element_size : tensor.element_size;
    const std::string key = layer_key(p.input);
    auto [it, fresh] = layer_of.emplace(key, kv.layers.size());
    if (fresh) {
      KvLayer l;
      l.name = key == p.input ? p.input : "layer " + key;
      l.kind = p.length_axis < 0 ? KvKind::kRecurrent
               : p.window > 0    ? KvKind::kSliding
                                 : KvKind::kFull;
      l.window = p.window;
      kv.layers.push_back(l);
    }
    KvLayer& l = kv.layers[it->second];
    if (l.kind == KvKind::kRecurrent)
      l.bytes_per_sequence = checked_add(l.bytes_per_sequence, bytes, "KV bytes");
    else
      l.bytes_per_token = checked_add(l.bytes_per_token, bytes, "KV bytes");
  }
  return kv;
}

}  // namespace modelmem::model
