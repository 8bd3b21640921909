// Hugging Face checkpoint folders without their weights (modelmem/model/checkpoint.hpp).
#include "modelmem/model/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace modelmem::model {
namespace {

// The safetensors format caps the header at 100 MB.
constexpr std::uint64_t kMaxHeader = 100'000'000;

std::size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"F64", 8},  {"F32", 4},     {"F16", 2},     {"BF16", 2},    {"I64", 8}, {"I32", 4},
      {"I16", 2},  {"I8", 1},      {"U64", 8},     {"U32", 4},     {"U16", 2}, {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"E8M0", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

std::size_t dtype_size(const std::string& name, const std::string& what) {
  static const std::map<std::string, std::size_t> sizes = {
      {"fp32", 4}, {"float32", 4},  {"float", 4}, {"fp16", 2},     {"float16", 2},  {"half", 2},
      {"bf16", 2}, {"bfloat16", 2}, {"fp8", 1},   {"fp8_e4m3", 1}, {"fp8_e5m2", 1}, {"int8", 1}};
  auto it = sizes.find(name);
  if (it == sizes.end())
    throw InvalidInput(fmt::format(
        "{} {}: expected fp32, fp16, bf16, fp8 (fp8_e4m3, fp8_e5m2) or int8", what, name));
  return it->second;
}

std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw InvalidInput(fmt::format("{}: {}", path, what));
  };
  core::check_input_file(path, "safetensors");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open");
  std::error_code ec;
  const std::uint64_t file_size = fs::file_size(path, ec);
  if (ec) fail("cannot read its size");
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    fail("shorter than the 8-byte header length of a safetensors file");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n == 0 || n > kMaxHeader)
    fail(fmt::format("header length {} is not that of a safetensors file (1 to {} bytes)", n,
                     kMaxHeader));
  if (n > file_size - 8)
    fail(fmt::format("header of {} bytes runs past the end of the file ({} bytes)", n, file_size));
  std::string text(static_cast<std::size_t>(n), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) fail("truncated header");
  json header;
  try {
    header = json::parse(text);
  } catch (const std::exception& e) {
    fail(fmt::format("the header is not JSON ({})", e.what()));
  }
  if (!header.is_object()) fail("the header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - n;
  const std::string file = fs::path(path).filename().string();
  std::vector<SafetensorsEntry> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string& tensor = name;  // a lambda may not capture a structured binding (clang 14)
    auto bad = [&](const std::string& what) { fail(fmt::format("tensor '{}': {}", tensor, what)); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("needs dtype, shape and data_offsets [begin, end]");
    SafetensorsEntry e;
    e.file = file;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    const std::size_t esize = safetensors_dtype_size(e.dtype);
    if (esize == 0) bad(fmt::format("unknown dtype '{}'", e.dtype));
    std::size_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("a dim of its shape is not a whole number >= 0");
      e.shape.push_back(d.get<std::int64_t>());
      count = checked_mul(count, d.get<std::size_t>(), "tensor size");
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets are not whole numbers");
    const std::uint64_t b = off[0].get<std::uint64_t>(), en = off[1].get<std::uint64_t>();
    if (en < b || en > data_size)
      bad(fmt::format("data_offsets [{}, {}] run past the data ({} bytes)", b, en, data_size));
    e.bytes = static_cast<std::size_t>(en - b);
    const std::size_t expected = checked_mul(count, esize, "tensor size");
    if (e.bytes != expected)
      bad(fmt::format("data_offsets give {} bytes, dtype {} x shape gives {}", e.bytes, e.dtype,
                      expected));
    ranges.emplace_back(b, en);
    out.push_back(std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail("two tensors' data_offsets overlap");
  return out;
}

namespace {

std::int64_t int_of(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = c.find(k);
    if (it != c.end() && it->is_number_integer()) return it->get<std::int64_t>();
  }
  return 0;
}

}  // namespace

ModelConfig read_model_config(const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw InvalidInput(fmt::format("{}: {}", path, what));
  };
  const std::string text = core::read_input_file(path, "model config", core::kMaxTextInput);
  json top;
  try {
    top = json::parse(text);
  } catch (const std::exception& e) {
    fail(fmt::format("not JSON ({})", e.what()));
  }
  if (!top.is_object()) fail("not a JSON object");
  const json& c = top.contains("text_config") && top["text_config"].is_object() &&
                          !top.contains("num_hidden_layers")
                      ? top["text_config"]
                      : top;
  ModelConfig m;
  if (c.contains("model_type") && c["model_type"].is_string())
    m.model_type = c["model_type"].get<std::string>();
  else if (top.contains("model_type") && top["model_type"].is_string())
    m.model_type = top["model_type"].get<std::string>();
  for (const char* k : {"torch_dtype", "dtype"}) {
    for (const json* j : std::initializer_list<const json*>{&c, &top})
      if (m.torch_dtype.empty() && j->contains(k) && (*j)[k].is_string())
        m.torch_dtype = (*j)[k].get<std::string>();
  }
  m.layers = int_of(c, {"num_hidden_layers", "n_layer", "num_layers"});
  m.hidden = int_of(c, {"hidden_size", "n_embd", "d_model"});
  m.heads = int_of(c, {"num_attention_heads", "n_head"});
  if (m.layers <= 0) fail("no num_hidden_layers (or n_layer) > 0");
  if (m.hidden <= 0) fail("no hidden_size (or n_embd) > 0");
  if (m.heads <= 0) fail("no num_attention_heads (or n_head) > 0");
  m.kv_heads = int_of(c, {"num_key_value_heads", "num_kv_heads"});
  if (m.kv_heads == 0) m.kv_heads = c.value("multi_query", false) ? 1 : m.heads;
  if (m.kv_heads < 0 || m.kv_heads > m.heads)
    fail(fmt::format("num_key_value_heads {} is not between 1 and num_attention_heads {}",
                     m.kv_heads, m.heads));
  m.head_dim = int_of(c, {"head_dim"});
  if (m.head_dim == 0) {
    if (m.hidden % m.heads != 0)
      fail(fmt::format("hidden_size {} is not a multiple of num_attention_heads {}: give head_dim",
                       m.hidden, m.heads));
    m.head_dim = m.hidden / m.heads;
  }
  m.intermediate = int_of(c, {"intermediate_size", "n_inner"});
  if (m.intermediate == 0) m.intermediate = 4 * m.hidden;
  m.vocab = int_of(c, {"vocab_size"});
  m.max_positions = int_of(c, {"max_position_embeddings", "n_positions", "n_ctx"});
  for (const char* key : {"max_position_embeddings", "n_positions", "n_ctx"})
    if (c.contains(key) && m.max_positions > 0) {
      m.max_positions_source = fmt::format("{} {}", key, m.max_positions);
      break;
    }
  if (m.max_positions < 0) fail("max_position_embeddings < 0");
  // Rope scaling stretches the positions by its factor (rope_scaling, or transformers 5's
  // rope_parameters); llama3 and longrope configs give the stretched count already.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = c.find(key);
    if (it == c.end() || !it->is_object() || m.max_positions <= 0) continue;
    std::string type;
    for (const char* t : {"rope_type", "type"})
      if (it->contains(t) && (*it)[t].is_string()) type = (*it)[t].get<std::string>();
    if (type != "linear" && type != "dynamic" && type != "yarn") continue;
    if (!it->contains("factor") || !(*it)["factor"].is_number()) continue;
    const double factor = (*it)["factor"].get<double>();
    if (!(factor >= 1 && factor <= 1024))
      fail(fmt::format("{} factor {} is not in [1, 1024]", key, factor));
    std::int64_t base = m.max_positions;
    const bool original = type == "yarn" && it->contains("original_max_position_embeddings") &&
                          (*it)["original_max_position_embeddings"].is_number_integer();
    if (original) base = (*it)["original_max_position_embeddings"].get<std::int64_t>();
    if (base <= 0) fail(fmt::format("{} original_max_position_embeddings <= 0", key));
    m.max_positions = static_cast<std::int64_t>(static_cast<double>(base) * factor);
    m.max_positions_source =
        fmt::format("{} {} x {} factor {} ({})",
                    original ? "original_max_position_embeddings" : "max_position_embeddings", base,
                    key, factor, type);
    break;
  }
  m.kv_lora_rank = int_of(c, {"kv_lora_rank"});
  m.qk_rope_head_dim = int_of(c, {"qk_rope_head_dim"});
  if (m.kv_lora_rank < 0 || m.qk_rope_head_dim < 0) fail("kv_lora_rank or qk_rope_head_dim < 0");

  std::int64_t window = int_of(c, {"sliding_window"});
  if (c.contains("use_sliding_window") && c["use_sliding_window"].is_boolean() &&
      !c["use_sliding_window"].get<bool>())
    window = 0;  // Qwen2 writes a window it does not use
  if (window < 0) fail("sliding_window < 0");
  m.sliding_window = window;
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const auto& t : c["layer_types"]) {
      if (!t.is_string()) fail("layer_types holds a value that is not a string");
      m.layer_types.push_back(t.get<std::string>());
    }
    if (static_cast<std::int64_t>(m.layer_types.size()) != m.layers)
      fail(fmt::format("layer_types lists {} layers, num_hidden_layers is {}", m.layer_types.size(),
                       m.layers));
  } else if (window > 0) {
    // The families that mix layers without a layer_types list.
    const std::int64_t max_window_layers = int_of(c, {"max_window_layers"});
    const std::int64_t pattern = int_of(c, {"sliding_window_pattern"});
    for (std::int64_t i = 0; i < m.layers; ++i) {
      bool sliding = true;
      if (m.model_type == "gemma2")
        sliding = i % 2 == 0;
      else if (pattern > 0)
        sliding = (i + 1) % pattern != 0;
      else if (c.contains("max_window_layers") && m.model_type.rfind("qwen", 0) == 0)
        sliding = i >= max_window_layers;
      m.layer_types.push_back(sliding ? "sliding_attention" : "full_attention");
    }
  }
  return m;
}

KvCache kv_cache_of(const ModelConfig& c, std::size_t element_size, int tp) {
  if (tp <= 0) throw InvalidInput(fmt::format("--tp {}: must be a positive number of ranks", tp));
  if (element_size == 0) throw InvalidInput("KV element size must be positive");
  KvCache kv;
  kv.element_size = element_size;
  std::int64_t heads_per_rank = c.kv_heads;
  if (c.kv_lora_rank == 0) {
    if (c.kv_heads >= tp && c.kv_heads % tp != 0)
      throw InvalidInput(
          fmt::format("--tp {}: the model's {} KV heads do not split evenly over {} ranks", tp,
                      c.kv_heads, tp));
    heads_per_rank = std::max<std::int64_t>(1, c.kv_heads / tp);
  }
  for (std::int64_t i = 0; i < c.layers; ++i) {
    KvLayer l;
    l.name = fmt::format("layer {}", i);
    const std::string type =
        c.layer_types.empty() ? "full_attention" : c.layer_types[static_cast<std::size_t>(i)];
    std::size_t per_token = 0;
    if (c.kv_lora_rank > 0) {
      l.kind = KvKind::kLatent;
      per_token = static_cast<std::size_t>(c.kv_lora_rank + c.qk_rope_head_dim) * element_size;
    } else {
      per_token = checked_mul(static_cast<std::size_t>(2 * heads_per_rank),
                              static_cast<std::size_t>(c.head_dim) * element_size, "KV bytes");
      if (type == "sliding_attention") {
        if (c.sliding_window <= 0)
          throw InvalidInput(fmt::format(
              "config: layer {} is sliding_attention but the config has no sliding_window", i));
        l.kind = KvKind::kSliding;
        l.window = c.sliding_window;
      } else if (type == "full_attention" || type == "attention") {
        l.kind = KvKind::kFull;
      } else {
        throw InvalidInput(
            fmt::format("config: layer {} is of type '{}', which modelmem does not size (known: "
                        "full_attention, sliding_attention)",
                        i, type));
      }
    }
    l.bytes_per_token = per_token;
    kv.layers.push_back(l);
  }
  return kv;
}

std::vector<std::size_t> Checkpoint::tensor_bytes_per_rank(int tp, std::size_t float_bytes) const {
  if (tp <= 0) throw InvalidInput(fmt::format("--tp {}: must be a positive number of ranks", tp));
  std::vector<std::size_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    std::size_t count = 1;
    for (auto d : t.shape) count *= static_cast<std::size_t>(d);
    std::size_t esize = count ? t.bytes / count : 0;
    if (count && esize * count != t.bytes) {
      // Quantised blocks (GGUF): kept as stored; a rank holds its share of the bytes.
      out.push_back(t.shape.size() >= 2 ? (t.bytes + static_cast<std::size_t>(tp) - 1) /
                                              static_cast<std::size_t>(tp)
                                        : t.bytes);
      continue;
    }
    if (float_bytes && (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16"))
      esize = float_bytes;
    if (t.shape.size() >= 2)
      count = (count + static_cast<std::size_t>(tp) - 1) / static_cast<std::size_t>(tp);
    out.push_back(checked_mul(count, esize, "weights bytes"));
  }
  return out;
}

std::size_t Checkpoint::weights_per_rank(int tp, std::size_t float_bytes) const {
  std::size_t sum = 0;
  for (std::size_t b : tensor_bytes_per_rank(tp, float_bytes))
    sum = checked_add(sum, b, "weights bytes");
  return sum;
}

bool is_checkpoint_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

namespace {

// The shards a sharded save's index (model.safetensors.index.json) names in its weight_map,
// each a file of `folder`; one line naming the problem otherwise.
std::vector<fs::path> indexed_shards(const std::string& folder, const fs::path& index) {
  json j;
  try {
    j = json::parse(core::read_input_file(index.string(), "checkpoint index", core::kMaxTextInput));
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("{}: not JSON ({})", index.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw InvalidInput(fmt::format("{}: no weight_map object", index.string()));
  std::set<std::string> names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string())
      throw InvalidInput(
          fmt::format("{}: weight_map['{}'] is not a file name", index.string(), tensor));
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw InvalidInput(fmt::format("{}: weight_map['{}'] names '{}', not a file of the folder",
                                     index.string(), tensor, name));
    names.insert(name);
  }
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& name : names) {
    const fs::path f = fs::path(folder) / name;
    if (!fs::is_regular_file(f, ec))
      throw InvalidInput(fmt::format("{}: names {}, which the folder lacks", index.string(), name));
    files.push_back(f);
  }
  return files;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw InvalidInput(
        fmt::format("{}: not a folder (a checkpoint is a folder with config.json "
                    "and *.safetensors)",
                    folder));
  if (!fs::is_regular_file(fs::path(folder) / "config.json", ec))
    throw InvalidInput(fmt::format("{}: no config.json", folder));
  Checkpoint ck;
  ck.folder = folder;
  ck.config = read_model_config((fs::path(folder) / "config.json").string());
  std::vector<fs::path> files;
  // A sharded save (model.safetensors.index.json, as transformers writes it) names its shards in
  // its weight_map: those are the weights, and a shard of an earlier save left in the folder is
  // not. Without an index, every *.safetensors file of the folder is.
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) {
    files = indexed_shards(folder, index);
  } else {
    for (const auto& e : fs::directory_iterator(folder, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw InvalidInput(
        fmt::format("{}: no *.safetensors file (the weights' headers give their "
                    "exact bytes)",
                    folder));
  for (const auto& f : files) {
    auto entries = read_safetensors_header(f.string());
    for (auto& e : entries) {
      ck.weights_bytes = checked_add(ck.weights_bytes, e.bytes, "weights bytes");
      std::size_t count = 1;
      for (auto d : e.shape) count *= static_cast<std::size_t>(d);
      ck.weights_params += count;
      ck.tensors.push_back(std::move(e));
    }
  }
  ck.file_count = files.size();
  return ck;
}

}  // namespace modelmem::model
