// The safe reader of pickle's data subset (trace/pickle.hpp).
#include "modelmem/trace/pickle.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <limits>

#include "modelmem/core/error.hpp"

namespace modelmem::trace::pickle {

namespace {

// Names of the opcodes this reader refuses, for the message.
const char* refused_name(unsigned char op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    case 'I':
      return "INT (protocol 0)";
    case 'L':
      return "LONG (protocol 0)";
    case 'F':
      return "FLOAT (protocol 0)";
    case 'S':
      return "STRING (protocol 0)";
    case 'V':
      return "UNICODE (protocol 0)";
    case 'p':
      return "PUT (protocol 0)";
    case 'g':
      return "GET (protocol 0)";
    default:
      return nullptr;
  }
}

bool is_code_opcode(unsigned char op) {
  return op == 'c' || op == 0x93 || op == 'R' || op == 'b' || op == 'i' || op == 'o' ||
         op == 0x81 || op == 0x92 || op == 0x82 || op == 0x83 || op == 0x84 || op == 'P' ||
         op == 'Q';
}

class Parser {
 public:
  Parser(std::string_view data, const std::string& name) : data_(data), name_(name) {
    // Shared singletons: None, False, True.
    doc_.nodes.push_back(Node{});
    doc_.nodes.push_back(Node{Kind::kBool, false, 0, 0, {}, {}});
    doc_.nodes.push_back(Node{Kind::kBool, false, 1, 0, {}, {}});
  }

  Document run() {
    if (data_.empty()) fail(0, "empty file, not a pickle");
    while (pos_ < data_.size()) {
      op_pos_ = pos_;
      const unsigned char op = static_cast<unsigned char>(data_[pos_++]);
      if (step(op)) {
        if (stack_.size() != 1 || !marks_.empty())
          fail(op_pos_, "STOP with {} values on the stack", stack_.size());
        doc_.root = stack_.back();
        return std::move(doc_);
      }
    }
    fail(data_.size(), "truncated: the pickle ends without STOP");
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(std::size_t offset, fmt::format_string<Args...> format, Args&&... args) {
    throw InvalidInput(fmt::format("{}: pickle byte {}: {}", name_, offset,
                                   fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string_view take(std::size_t n) {
    if (n > data_.size() - pos_)
      fail(op_pos_, "truncated: an argument of {} bytes, {} left", n, data_.size() - pos_);
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::uint64_t le(std::size_t n) {
    std::string_view s = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
      v |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
    return v;
  }

  Id add(Node node) {
    if (doc_.nodes.size() >= std::numeric_limits<Id>::max()) fail(op_pos_, "too many values");
    doc_.nodes.push_back(std::move(node));
    return static_cast<Id>(doc_.nodes.size() - 1);
  }
  void push(Id id) { stack_.push_back(id); }
  Id pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size()))
      fail(op_pos_, "stack underflow");
    Id id = stack_.back();
    stack_.pop_back();
    return id;
  }
  Id top() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size()))
      fail(op_pos_, "stack underflow");
    return stack_.back();
  }
  // Values pushed since the last MARK, removed from the stack (and the mark popped).
  std::vector<Id> pop_mark() {
    if (marks_.empty()) fail(op_pos_, "no MARK to pop to");
    std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Id> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Node& container(Id id, Kind want, const char* opcode) {
    Node& n = doc_.nodes[id];
    if (n.kind != want)
      fail(op_pos_, "{} on a {}, expected a {}", opcode, kind_name(n.kind), kind_name(want));
    return n;
  }
  void memo_put(std::uint64_t index) {
    if (index > std::numeric_limits<std::uint32_t>::max()) fail(op_pos_, "memo index too large");
    memo_[static_cast<std::uint32_t>(index)] = top();
  }
  void memo_get(std::uint64_t index) {
    auto it = memo_.find(static_cast<std::uint32_t>(index));
    if (index > std::numeric_limits<std::uint32_t>::max() || it == memo_.end())
      fail(op_pos_, "memo entry {} not defined", index);
    push(it->second);
  }
  void string_node(Kind kind, std::size_t n) {
    Node node;
    node.kind = kind;
    node.s = std::string(take(n));
    push(add(std::move(node)));
  }
  void int_node(std::int64_t v) {
    Node node;
    node.kind = Kind::kInt;
    node.i = v;
    push(add(std::move(node)));
  }
  void long_node(std::size_t n) {
    std::string_view s = take(n);
    Node node;
    node.kind = Kind::kInt;
    if (n == 0) {
      push(add(std::move(node)));
      return;
    }
    const bool negative = (static_cast<unsigned char>(s[n - 1]) & 0x80) != 0;
    std::size_t used = n;
    // Drop redundant sign bytes: 9 bytes of which the top is 0 hold an unsigned 64-bit value.
    while (used > 8 && static_cast<unsigned char>(s[used - 1]) == (negative ? 0xff : 0x00)) --used;
    if (used > 8) fail(op_pos_, "integer of {} bytes does not fit in 64 bits", n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < used; ++i)
      v |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
    if (used < 8 && negative) v |= ~std::uint64_t{0} << (8 * used);
    if (used == 8 && n > 8 && !negative && (v >> 63) != 0) node.big = true;
    if (used == 8 && n > 8 && negative && (v >> 63) == 0)
      fail(op_pos_, "integer of {} bytes does not fit in 64 bits", n);
    if (used == 8 && n == 8 && negative != ((v >> 63) != 0)) fail(op_pos_, "malformed integer");
    node.i = static_cast<std::int64_t>(v);
    push(add(std::move(node)));
  }
  void tuple_of(std::vector<Id> items) {
    Node node;
    node.kind = Kind::kTuple;
    node.items = std::move(items);
    push(add(std::move(node)));
  }
  void set_items(Id dict, const std::vector<Id>& items, const char* opcode) {
    if (items.size() % 2 != 0) fail(op_pos_, "{} with an odd number of values", opcode);
    Node& d = container(dict, Kind::kDict, opcode);
    d.items.insert(d.items.end(), items.begin(), items.end());
  }

  // Executes one opcode; true at STOP.
  bool step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        std::uint64_t p = le(1);
        if (p < 2 || p > 5) fail(op_pos_, "pickle protocol {}; this reader reads 2 to 5", p);
        return false;
      }
      case 0x95:
        le(8);
        return false;  // FRAME: a length hint only
      case '.':
        return true;  // STOP
      case '(':
        marks_.push_back(stack_.size());
        return false;
      case '0':
        pop();
        return false;
      case '1':
        pop_mark();
        return false;
      case '2':
        push(top());
        return false;
      case 'N':
        push(0);
        return false;
      case 0x89:
        push(1);
        return false;
      case 0x88:
        push(2);
        return false;
      case 'J':
        int_node(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4))));
        return false;
      case 'K':
        int_node(static_cast<std::int64_t>(le(1)));
        return false;
      case 'M':
        int_node(static_cast<std::int64_t>(le(2)));
        return false;
      case 0x8a:
        long_node(static_cast<std::size_t>(le(1)));
        return false;
      case 0x8b: {
        std::uint64_t n = le(4);
        if (n > data_.size() - pos_) fail(op_pos_, "truncated: LONG4 of {} bytes", n);
        long_node(static_cast<std::size_t>(n));
        return false;
      }
      case 'G': {
        std::string_view b = take(8);  // big-endian
        std::uint64_t bits = 0;
        for (char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);
        double d = std::bit_cast<double>(bits);
        Node node;
        node.kind = Kind::kFloat;
        node.f = d;
        push(add(std::move(node)));
        return false;
      }
      case 0x8c:
        string_node(Kind::kStr, static_cast<std::size_t>(le(1)));
        return false;
      case 'X':
        string_node(Kind::kStr, static_cast<std::size_t>(le(4)));
        return false;
      case 0x8d:
        string_node(Kind::kStr, sized(le(8)));
        return false;
      case 'U':
        string_node(Kind::kStr, static_cast<std::size_t>(le(1)));
        return false;
      case 'T': {
        auto n = static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4)));
        if (n < 0) fail(op_pos_, "BINSTRING of negative length");
        string_node(Kind::kStr, static_cast<std::size_t>(n));
        return false;
      }
      case 'C':
        string_node(Kind::kBytes, static_cast<std::size_t>(le(1)));
        return false;
      case 'B':
        string_node(Kind::kBytes, static_cast<std::size_t>(le(4)));
        return false;
      case 0x8e:
        string_node(Kind::kBytes, sized(le(8)));
        return false;
      case 0x96:
        string_node(Kind::kBytes, sized(le(8)));
        return false;
      case ']':
        push(add(Node{Kind::kList, false, 0, 0, {}, {}}));
        return false;
      case '}':
        push(add(Node{Kind::kDict, false, 0, 0, {}, {}}));
        return false;
      case ')':
        tuple_of({});
        return false;
      case 'l': {  // LIST
        Node node;
        node.kind = Kind::kList;
        node.items = pop_mark();
        push(add(std::move(node)));
        return false;
      }
      case 'd': {  // DICT
        std::vector<Id> items = pop_mark();
        Id dict = add(Node{Kind::kDict, false, 0, 0, {}, {}});
        set_items(dict, items, "DICT");
        push(dict);
        return false;
      }
      case 't':
        tuple_of(pop_mark());
        return false;
      case 0x85: {
        Id a = pop();
        tuple_of({a});
        return false;
      }
      case 0x86: {
        Id b = pop(), a = pop();
        tuple_of({a, b});
        return false;
      }
      case 0x87: {
        Id c = pop(), b = pop(), a = pop();
        tuple_of({a, b, c});
        return false;
      }
      case 'a': {
        Id v = pop();
        container(top(), Kind::kList, "APPEND").items.push_back(v);
        return false;
      }
      case 'e': {
        std::vector<Id> items = pop_mark();
        Node& l = container(top(), Kind::kList, "APPENDS");
        l.items.insert(l.items.end(), items.begin(), items.end());
        return false;
      }
      case 's': {
        Id v = pop(), k = pop();
        set_items(top(), {k, v}, "SETITEM");
        return false;
      }
      case 'u': {
        std::vector<Id> items = pop_mark();
        set_items(top(), items, "SETITEMS");
        return false;
      }
      case 'q':
        memo_put(le(1));
        return false;
      case 'r':
        memo_put(le(4));
        return false;
      case 0x94:
        memo_put(memo_.size());
        return false;
      case 'h':
        memo_get(le(1));
        return false;
      case 'j':
        memo_get(le(4));
        return false;
      default:
        break;
    }
    if (const char* name = refused_name(op)) {
      if (is_code_opcode(op))
        fail(op_pos_,
             "opcode {} refused: it would import or call Python code; a memory snapshot holds "
             "only dicts, lists, tuples, strings, bytes, numbers, booleans and None",
             name);
      fail(op_pos_, "opcode {} is not part of the data subset this reader reads", name);
    }
    fail(op_pos_, "unknown opcode 0x{:02x}", op);
  }

  std::size_t sized(std::uint64_t n) {
    if (n > data_.size() - pos_) fail(op_pos_, "truncated: an argument of {} bytes", n);
    return static_cast<std::size_t>(n);
  }

  std::string_view data_;
  const std::string& name_;
  std::size_t pos_ = 0;
  std::size_t op_pos_ = 0;
  Document doc_;
  std::vector<Id> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, Id> memo_;
};

}  // namespace

const char* kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
  }
  return "?";
}

std::optional<Id> Document::get_id(Id dict, std::string_view key) const {
  if (dict >= nodes.size()) return std::nullopt;
  const Node& d = nodes[dict];
  if (d.kind != Kind::kDict) return std::nullopt;
  const std::size_t pairs = d.items.size() / 2;
  if (pairs <= 16) {
    for (std::size_t p = pairs; p-- > 0;) {
      const Node& k = nodes[d.items[2 * p]];
      if (k.kind == Kind::kStr && k.s == key) return d.items[2 * p + 1];
    }
    return std::nullopt;
  }
  // Large dicts (only a hostile file has them here): an index built once, so lookups in a dict
  // shared by many entries stay O(1).
  auto [it, inserted] = index_.try_emplace(dict);
  if (inserted) {
    for (std::size_t p = 0; p < pairs; ++p) {
      const Node& k = nodes[d.items[2 * p]];
      if (k.kind == Kind::kStr) it->second[k.s] = d.items[2 * p + 1];
    }
  }
  auto found = it->second.find(std::string(key));
  if (found == it->second.end()) return std::nullopt;
  return found->second;
}

const Node* Document::get(Id dict, std::string_view key) const {
  auto id = get_id(dict, key);
  return id ? &nodes[*id] : nullptr;
}

std::optional<std::int64_t> as_int(const Node& node) {
  if ((node.kind != Kind::kInt && node.kind != Kind::kBool) || node.big) return std::nullopt;
  return node.i;
}

std::optional<std::uint64_t> as_uint(const Node& node) {
  if (node.kind != Kind::kInt && node.kind != Kind::kBool) return std::nullopt;
  if (!node.big && node.i < 0) return std::nullopt;
  return static_cast<std::uint64_t>(node.i);
}

std::optional<double> as_number(const Node& node) {
  if (node.kind == Kind::kFloat) return node.f;
  if (node.kind == Kind::kInt)
    return node.big ? static_cast<double>(static_cast<std::uint64_t>(node.i))
                    : static_cast<double>(node.i);
  return std::nullopt;
}

Document parse(std::string_view data, const std::string& name) {
  return Parser(data, name).run();
}

bool looks_like_pickle(std::string_view head) noexcept {
  return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 &&
         static_cast<unsigned char>(head[1]) >= 2 && static_cast<unsigned char>(head[1]) <= 5;
}

}  // namespace modelmem::trace::pickle
