// A GGUF file (llama.cpp's model format) read without its weights: the header, the metadata
// key-value pairs (every GGUF value type, arrays and nested arrays included) and the tensor infos
// (name, dims, ggml type, offset). Each tensor's bytes follow from its ggml type's block size and
// type size (ggml's own table, quantised types included), so the weight bytes are exact and
// quantised bytes stay as stored. The architecture's metadata (`ARCH.block_count`,
// `ARCH.attention.head_count_kv`, ...) maps to the ModelConfig the serving plan reads, so
// `plan --serve model.gguf` works as it does on a checkpoint folder. Every count and length is
// bounded by the file's size; a bad file is refused with one line naming it and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "modelmem/model/checkpoint.hpp"

namespace modelmem::model {

/// One ggml type: its name ("q4_K"), the elements of one block and the bytes of one block.
struct GgmlType {
  std::uint32_t id = 0;
  const char* name = "";
  std::size_t block_size = 0;
  std::size_t type_size = 0;
};

/// The ggml type numbered `id` (ggml.h's enum), or nullptr for a number ggml does not define.
const GgmlType* ggml_type(std::uint32_t id);
/// The ggml type named `name` ("f16", "q8_0", "q4_K"; case-insensitive), or nullptr.
const GgmlType* ggml_type_named(const std::string& name);
/// Every ggml type modelmem knows, in id order.
const std::vector<GgmlType>& ggml_types();
/// Bytes of a row of `elements` elements of `type` (ggml_row_size): elements must be a multiple
/// of the block size (InvalidInput otherwise, naming `what`).
std::size_t ggml_row_bytes(const GgmlType& type, std::size_t elements, const std::string& what);

struct GgufTensor {
  std::string name;
  std::vector<std::int64_t> dims;  ///< as stored: ne[0] (the contiguous one) first
  const GgmlType* type = nullptr;
  std::uint64_t offset = 0;  ///< from the start of the data section
  std::size_t bytes = 0;     ///< type_size x elements / block_size
};

/// A metadata value: scalars as their text and number, arrays by element type and count (the
/// elements of a numeric array are kept when short, those of a string array too).
struct GgufValue {
  std::uint32_t type = 0;  ///< GGUF value type (0 uint8 ... 12 float64; 9 array)
  std::string text;        ///< a string, or a scalar written as text
  double number = 0;       ///< a numeric or bool scalar
  bool is_number = false;
  std::uint32_t element_type = 0;  ///< arrays
  std::uint64_t count = 0;         ///< arrays: the element count
  std::vector<double> numbers;     ///< a numeric array's elements (up to kKeptElements)
};

struct GgufFile {
  std::string path;
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  ///< where the data section starts
  std::uint64_t file_size = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;
  std::size_t tensor_bytes = 0;  ///< the tensors' bytes, all of them
  /// The metadata value of `key` as a whole number; `fallback` where absent or not a number.
  std::int64_t integer(const std::string& key, std::int64_t fallback = 0) const;
  /// The metadata value of `key` as a string ("" where absent).
  std::string string(const std::string& key) const;
};

/// Reads the header, the metadata and the tensor infos of `path` (never the data). InvalidInput
/// "PATH: ..." for a file that is not GGUF (magic), of an unknown version, with a count or
/// length past the file's end, an unknown value or ggml type, a tensor whose elements are not
/// whole blocks, or whose data runs past the end of the file, or is misaligned.
GgufFile read_gguf(const std::string& path);

/// True when `path` is a regular file starting with the GGUF magic, or named *.gguf.
bool is_gguf_path(const std::string& path);

/// The architecture of a GGUF file as a ModelConfig (general.architecture's keys), and its
/// tensors as a Checkpoint (dtype = the ggml type's name; bytes as stored). InvalidInput naming
/// the file and the missing key where the architecture lacks block_count, embedding_length or
/// attention.head_count.
Checkpoint checkpoint_of_gguf(const GgufFile& file);

/// A GGUF file (is_gguf_path) as checkpoint_of_gguf(read_gguf()) gives it, else a checkpoint
/// folder as read_checkpoint() does.
Checkpoint read_checkpoint_or_gguf(const std::string& path);

}  // namespace modelmem::model
