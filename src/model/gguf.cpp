// GGUF files without their weights (modelmem/model/gguf.hpp). The layout (GGUF v2 and v3, little
// endian): "GGUF", version u32, tensor count u64, metadata count u64, the metadata pairs (a
// string key, a u32 value type, the value), the tensor infos (a string name, n_dims u32, dims
// u64 each, ggml type u32, offset u64), then padding to general.alignment (32 by default) and
// the data. Strings are a u64 length and bytes; arrays an element type u32, a count u64 and the
// elements.
#include "modelmem/model/gguf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace fs = std::filesystem;

namespace modelmem::model {
namespace {

// ggml's types (ggml.h's enum, ggml-common.h's blocks): elements per block, bytes per block.
// The numbers ggml removed (4, 5, 31-33, 36-38) are not types of a file.
const std::vector<GgmlType> kTypes = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
};

enum ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// The fewest bytes a value of each type takes in the file (a string: its length; an array: its
// element type and count), which bounds every count read by the bytes left.
std::uint64_t min_bytes(std::uint32_t t) {
  static const std::uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
  return t <= kF64 ? sizes[t] : 0;
}

constexpr std::size_t kKeptElements = 4096;  // a numeric array's elements kept (per-layer lists)
constexpr int kMaxNesting = 8;
constexpr std::uint64_t kMaxKey = 65535;

class Reader {
 public:
  Reader(const std::string& path, std::uint64_t size) : path_(path), size_(size) {
    in_.open(path, std::ios::binary);
    if (!in_) fail("cannot open");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidInput(fmt::format("{}: {}", path_, what));
  }
  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }
  void bytes(void* out, std::uint64_t n, const char* what) {
    if (n > left())
      fail(
          fmt::format("{} at byte {} runs past the end of the file ({} bytes)", what, pos_, size_));
    if (!in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n)))
      fail(fmt::format("cannot read {} at byte {}", what, pos_));
    pos_ += n;
  }
  void skip(std::uint64_t n, const char* what) {
    if (n > left())
      fail(fmt::format("{} of {} bytes at byte {} runs past the end of the file ({} bytes)", what,
                       n, pos_, size_));
    in_.seekg(static_cast<std::streamoff>(n), std::ios::cur);
    pos_ += n;
  }
  template <typename T>
  T scalar(const char* what) {
    unsigned char b[sizeof(T)];
    bytes(b, sizeof(T), what);
    std::uint64_t v = 0;
    for (std::size_t i = sizeof(T); i-- > 0;) v = (v << 8) | b[i];
    T out;
    if constexpr (sizeof(T) == 8) {
      std::memcpy(&out, &v, 8);
    } else {
      const auto narrow = static_cast<std::uint32_t>(v);
      if constexpr (sizeof(T) == 4) {
        std::memcpy(&out, &narrow, 4);
      } else if constexpr (sizeof(T) == 2) {
        const auto n16 = static_cast<std::uint16_t>(narrow);
        std::memcpy(&out, &n16, 2);
      } else {
        const auto n8 = static_cast<std::uint8_t>(narrow);
        std::memcpy(&out, &n8, 1);
      }
    }
    return out;
  }
  std::string string(const char* what, std::uint64_t max = UINT64_MAX) {
    const auto n = scalar<std::uint64_t>(what);
    if (n > left())
      fail(fmt::format("{} of {} bytes at byte {} runs past the end of the file ({} bytes)", what,
                       n, pos_, size_));
    if (n > max) fail(fmt::format("{} of {} bytes is longer than {} bytes", what, n, max));
    std::string s(static_cast<std::size_t>(n), '\0');
    bytes(s.data(), n, what);
    return s;
  }

 private:
  std::string path_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::ifstream in_;
};

// One scalar of type `t` as a number (and as text).
void read_scalar(Reader& r, std::uint32_t t, GgufValue& v, const std::string& key) {
  v.is_number = true;
  switch (t) {
    case kU8:
      v.number = r.scalar<std::uint8_t>("a uint8");
      break;
    case kI8:
      v.number = r.scalar<std::int8_t>("an int8");
      break;
    case kU16:
      v.number = r.scalar<std::uint16_t>("a uint16");
      break;
    case kI16:
      v.number = r.scalar<std::int16_t>("an int16");
      break;
    case kU32:
      v.number = r.scalar<std::uint32_t>("a uint32");
      break;
    case kI32:
      v.number = r.scalar<std::int32_t>("an int32");
      break;
    case kF32:
      v.number = r.scalar<float>("a float32");
      break;
    case kBool: {
      const auto b = r.scalar<std::uint8_t>("a bool");
      if (b > 1) r.fail(fmt::format("metadata '{}': bool value {} is not 0 or 1", key, b));
      v.number = b;
      break;
    }
    case kU64:
      v.number = static_cast<double>(r.scalar<std::uint64_t>("a uint64"));
      break;
    case kI64:
      v.number = static_cast<double>(r.scalar<std::int64_t>("an int64"));
      break;
    case kF64:
      v.number = r.scalar<double>("a float64");
      break;
    default:
      r.fail(fmt::format("metadata '{}': unknown value type {}", key, t));
  }
  v.text = fmt::format("{}", v.number);
}

void read_value(Reader& r, std::uint32_t t, GgufValue& v, const std::string& key, int depth) {
  v.type = t;
  if (t == kString) {
    v.text = r.string("a metadata string");
    return;
  }
  if (t != kArray) {
    read_scalar(r, t, v, key);
    return;
  }
  if (depth >= kMaxNesting)
    r.fail(fmt::format("metadata '{}': arrays nested more than {} deep", key, kMaxNesting));
  v.element_type = r.scalar<std::uint32_t>("an array's element type");
  v.count = r.scalar<std::uint64_t>("an array's count");
  const std::uint64_t each = min_bytes(v.element_type);
  if (each == 0)
    r.fail(fmt::format("metadata '{}': unknown array element type {}", key, v.element_type));
  if (v.count > r.left() / each)
    r.fail(fmt::format("metadata '{}': an array of {} elements cannot fit in the {} bytes left",
                       key, v.count, r.left()));
  for (std::uint64_t i = 0; i < v.count; ++i) {
    if (v.element_type == kString) {
      const auto n = r.scalar<std::uint64_t>("a metadata string");
      r.skip(n, "a metadata string");
    } else if (v.element_type == kArray) {
      GgufValue inner;
      read_value(r, kArray, inner, key, depth + 1);
    } else if (v.numbers.size() < kKeptElements) {
      GgufValue e;
      read_scalar(r, v.element_type, e, key);
      v.numbers.push_back(e.number);
    } else {
      r.skip(each, "an array element");
    }
  }
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<GgmlType>& ggml_types() {
  return kTypes;
}

const GgmlType* ggml_type(std::uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlType* ggml_type_named(const std::string& name) {
  const std::string u = upper(name);
  for (const auto& t : kTypes)
    if (u == t.name) return &t;
  return nullptr;
}

std::size_t ggml_row_bytes(const GgmlType& type, std::size_t elements, const std::string& what) {
  if (elements % type.block_size != 0)
    throw InvalidInput(fmt::format("{}: {} elements are not whole {} blocks of {}", what, elements,
                                   type.name, type.block_size));
  return checked_mul(elements / type.block_size, type.type_size, "ggml row bytes");
}

std::int64_t GgufFile::integer(const std::string& key, std::int64_t fallback) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) return fallback;
  const GgufValue& v = it->second;
  if (v.is_number) return static_cast<std::int64_t>(v.number);
  if (v.type == kArray && !v.numbers.empty())  // per-layer values: the largest
    return static_cast<std::int64_t>(*std::max_element(v.numbers.begin(), v.numbers.end()));
  return fallback;
}

std::string GgufFile::string(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() || it->second.type != kString ? "" : it->second.text;
}

GgufFile read_gguf(const std::string& path) {
  core::check_input_file(path, "GGUF");
  GgufFile f;
  f.path = path;
  std::error_code ec;
  f.file_size = fs::file_size(path, ec);
  if (ec) throw InvalidInput(fmt::format("{}: cannot read its size", path));
  Reader r(path, f.file_size);
  char magic[4];
  if (f.file_size < 4) r.fail("shorter than the 4-byte GGUF magic");
  r.bytes(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file (no GGUF magic)");
  f.version = r.scalar<std::uint32_t>("the version");
  if (f.version != 2 && f.version != 3)
    r.fail(fmt::format("GGUF version {}: expected 2 or 3", f.version));
  const auto n_tensors = r.scalar<std::uint64_t>("the tensor count");
  const auto n_kv = r.scalar<std::uint64_t>("the metadata count");
  // A pair is at least a key length, a value type and one byte; a tensor info at least a name
  // length, n_dims, a type and an offset.
  if (n_kv > r.left() / 13)
    r.fail(fmt::format("{} metadata pairs cannot fit in the {} bytes left", n_kv, r.left()));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string("a metadata key", kMaxKey);
    const auto t = r.scalar<std::uint32_t>("a value type");
    GgufValue v;
    read_value(r, t, v, key, 0);
    if (!f.metadata.emplace(key, std::move(v)).second)
      r.fail(fmt::format("metadata key '{}' appears twice", key));
  }
  if (n_tensors > r.left() / 24)
    r.fail(fmt::format("{} tensor infos cannot fit in the {} bytes left", n_tensors, r.left()));
  if (f.metadata.count("general.alignment")) {
    const GgufValue& a = f.metadata["general.alignment"];
    if (!a.is_number || a.number < 1 || a.number > 65536 ||
        (static_cast<std::uint64_t>(a.number) & (static_cast<std::uint64_t>(a.number) - 1)))
      r.fail(fmt::format("general.alignment {} is not a power of 2 up to 65536", a.text));
    f.alignment = static_cast<std::uint64_t>(a.number);
  }
  std::unordered_set<std::string> names;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = r.string("a tensor name", kMaxKey);
    auto bad = [&](const std::string& what) {
      r.fail(fmt::format("tensor '{}': {}", t.name, what));
    };
    const auto n_dims = r.scalar<std::uint32_t>("a tensor's n_dims");
    if (n_dims == 0 || n_dims > 4) bad(fmt::format("n_dims {} is not 1 to 4", n_dims));
    std::size_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = r.scalar<std::uint64_t>("a tensor dim");
      if (dim > static_cast<std::uint64_t>(INT64_MAX)) bad(fmt::format("dim {} is too large", dim));
      t.dims.push_back(static_cast<std::int64_t>(dim));
      if (__builtin_mul_overflow(elements, static_cast<std::size_t>(dim), &elements))
        bad(fmt::format("its {} dims multiply past 64 bits", n_dims));
    }
    const auto type = r.scalar<std::uint32_t>("a tensor's type");
    t.type = ggml_type(type);
    if (!t.type) bad(fmt::format("unknown ggml type {}", type));
    if (t.dims[0] % static_cast<std::int64_t>(t.type->block_size) != 0)
      bad(fmt::format("its first dim {} is not whole {} blocks of {}", t.dims[0], t.type->name,
                      t.type->block_size));
    if (__builtin_mul_overflow(elements / t.type->block_size, t.type->type_size, &t.bytes))
      bad(fmt::format("its size in bytes ({} elements of {}) overflows 64 bits", elements,
                      t.type->name));
    t.offset = r.scalar<std::uint64_t>("a tensor's offset");
    if (t.offset % f.alignment != 0)
      bad(fmt::format("offset {} is not a multiple of the alignment {}", t.offset, f.alignment));
    if (!names.insert(t.name).second)
      bad("the name appears twice (llama.cpp refuses such a file: a duplicate tensor name)");
    f.tensors.push_back(std::move(t));
  }
  f.data_offset = (r.pos() + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > f.file_size && !f.tensors.empty())
    r.fail(fmt::format("the data section at byte {} starts past the end of the file ({} bytes)",
                       f.data_offset, f.file_size));
  const std::uint64_t data = f.file_size > f.data_offset ? f.file_size - f.data_offset : 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& t : f.tensors) {
    if (t.offset > data || t.bytes > data - t.offset)
      r.fail(fmt::format("tensor '{}': {} bytes at offset {} run past the data ({} bytes)", t.name,
                         t.bytes, t.offset, data));
    ranges.emplace_back(t.offset, t.offset + t.bytes);
    f.tensor_bytes = checked_add(f.tensor_bytes, t.bytes, "tensor bytes");
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) r.fail("two tensors' data overlap");
  return f;
}

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  if (fs::path(path).extension() == ".gguf") return true;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Checkpoint checkpoint_of_gguf(const GgufFile& f) {
  const std::string arch = f.string("general.architecture");
  if (arch.empty()) throw InvalidInput(fmt::format("{}: no general.architecture", f.path));
  auto key = [&](const char* k) { return arch + "." + k; };
  auto need = [&](const char* k) {
    const std::int64_t v = f.integer(key(k));
    if (v <= 0) throw InvalidInput(fmt::format("{}: no {} > 0", f.path, key(k)));
    return v;
  };
  Checkpoint ck;
  ck.folder = f.path;
  ck.file_count = 1;
  ModelConfig& m = ck.config;
  m.model_type = arch;
  m.torch_dtype = "float16";  // llama.cpp's KV cache default (-ctk f16); activations float
  m.layers = need("block_count");
  m.hidden = need("embedding_length");
  m.heads = need("attention.head_count");
  m.kv_heads = f.integer(key("attention.head_count_kv"), m.heads);
  if (m.kv_heads <= 0 || m.kv_heads > m.heads)
    throw InvalidInput(fmt::format("{}: {} {} is not between 1 and {} {}", f.path,
                                   key("attention.head_count_kv"), m.kv_heads,
                                   key("attention.head_count"), m.heads));
  const std::int64_t k_len = f.integer(key("attention.key_length"), m.hidden / m.heads);
  const std::int64_t v_len = f.integer(key("attention.value_length"), k_len);
  if (k_len <= 0 || v_len <= 0)
    throw InvalidInput(
        fmt::format("{}: attention key_length {} or value_length {} <= 0", f.path, k_len, v_len));
  if ((k_len + v_len) % 2 != 0)
    throw InvalidInput(
        fmt::format("{}: key_length {} + value_length {} is odd", f.path, k_len, v_len));
  m.head_dim = (k_len + v_len) / 2;  // the KV bytes per token are heads x (key + value)
  m.intermediate = f.integer(key("feed_forward_length"), 4 * m.hidden);
  m.vocab = f.integer(key("vocab_size"));
  if (m.vocab == 0) {
    auto it = f.metadata.find("tokenizer.ggml.tokens");
    if (it != f.metadata.end()) m.vocab = static_cast<std::int64_t>(it->second.count);
  }
  m.max_positions = f.integer(key("context_length"));
  if (m.max_positions < 0)
    throw InvalidInput(fmt::format("{}: {} < 0", f.path, key("context_length")));
  if (m.max_positions > 0)
    m.max_positions_source = fmt::format("{} {}", key("context_length"), m.max_positions);
  m.kv_lora_rank = f.integer(key("attention.kv_lora_rank"));
  if (m.kv_lora_rank > 0) m.qk_rope_head_dim = f.integer(key("rope.dimension_count"));
  m.sliding_window = f.integer(key("attention.sliding_window"));
  if (m.sliding_window < 0) throw InvalidInput(fmt::format("{}: sliding_window < 0", f.path));
  // The families whose GGUF has a window that llama.cpp applies to some layers (its own
  // patterns: Gemma-2 every other layer from the first, Gemma-3 five of six).
  if (m.sliding_window > 0 && (arch == "gemma2" || arch == "gemma3")) {
    const std::int64_t pattern = arch == "gemma2" ? 2 : 6;
    for (std::int64_t i = 0; i < m.layers; ++i)
      m.layer_types.push_back(i % pattern < pattern - 1 ? "sliding_attention" : "full_attention");
  } else {
    m.sliding_window = 0;  // a window llama.cpp does not apply (Mistral's as llama)
  }
  for (const auto& t : f.tensors) {
    SafetensorsEntry e;
    e.file = fs::path(f.path).filename().string();
    e.name = t.name;
    e.dtype = t.type->name;
    e.shape.assign(t.dims.rbegin(), t.dims.rend());  // outermost first, as torch writes it
    e.bytes = t.bytes;
    std::size_t count = 1;
    for (auto d : t.dims) count *= static_cast<std::size_t>(d);
    ck.weights_bytes = checked_add(ck.weights_bytes, t.bytes, "weights bytes");
    ck.weights_params += count;
    ck.tensors.push_back(std::move(e));
  }
  return ck;
}

Checkpoint read_checkpoint_or_gguf(const std::string& path) {
  return is_gguf_path(path) ? checkpoint_of_gguf(read_gguf(path)) : read_checkpoint(path);
}

}  // namespace modelmem::model
