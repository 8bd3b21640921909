// A safe reader for the data subset of Python's pickle format, protocols 2 to 5: dicts, lists,
// tuples, str, bytes, int, float, bool, None and the memo (shared references). A pickle is a
// program for a stack machine that may import and call anything; this reader interprets only
// the opcodes that build those plain values. Any other opcode (GLOBAL, STACK_GLOBAL, REDUCE,
// BUILD, INST, OBJ, NEWOBJ, PERSID, EXT*, sets, out-of-band buffers, the text opcodes of
// protocols 0 and 1) throws InvalidInput naming the opcode and its byte offset; nothing is ever
// executed or imported. Memory is bounded by the input size (a few dozen bytes per opcode).
// Values live in a Document (an arena indexed by Id), so shared and even cyclic references cost
// nothing and free nothing twice. Thread-compatible value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace modelmem::trace::pickle {

enum class Kind : std::uint8_t { kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict };

/// "None", "bool", "int", ... as Python names the type.
const char* kind_name(Kind kind) noexcept;

using Id = std::uint32_t;

struct Node {
  Kind kind = Kind::kNone;
  bool big = false;       ///< kInt: the value is an unsigned 64-bit number above INT64_MAX
  std::int64_t i = 0;     ///< kInt (bit pattern when big), kBool (0 or 1)
  double f = 0;           ///< kFloat
  std::string s;          ///< kStr (UTF-8 as written), kBytes
  std::vector<Id> items;  ///< kList, kTuple: elements; kDict: key, value, key, value, ...
};

class Document {
 public:
  Id root = 0;
  std::vector<Node> nodes;

  const Node& node(Id id) const { return nodes[id]; }
  /// The value of the str key `key` in dict `dict` (the last one, as Python keeps); nullptr when
  /// `dict` is not a dict or has no such key.
  const Node* get(Id dict, std::string_view key) const;
  std::optional<Id> get_id(Id dict, std::string_view key) const;

 private:
  mutable std::unordered_map<Id, std::unordered_map<std::string, Id>> index_;
};

/// An int node as a signed / unsigned 64-bit value; nullopt for another kind or out of range.
std::optional<std::int64_t> as_int(const Node& node);
std::optional<std::uint64_t> as_uint(const Node& node);
/// An int or float node as a double.
std::optional<double> as_number(const Node& node);

/// Parses a whole pickle (it must end with STOP; bytes after it are ignored). `name` prefixes
/// every message. Throws InvalidInput with the byte offset for a malformed or refused pickle.
Document parse(std::string_view data, const std::string& name);

/// True when `head` starts like a pickle of protocol 2-5 (PROTO opcode).
bool looks_like_pickle(std::string_view head) noexcept;

}  // namespace modelmem::trace::pickle
