// A recursive-descent JSON checker that keeps only two top-level integers. Depth is bounded so a
// hostile file cannot overflow the stack; numbers are validated by the JSON grammar even where
// they are skipped.
#include "modelmem/plan/plan_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace modelmem::plan {
namespace {

constexpr int kMaxDepth = 256;

class PlanFileReader {
 public:
  PlanFileReader(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  PlanSizes run() {
    skip_ws();
    if (peek() != '{') fail("the top level must be a JSON object");
    ++pos_;
    std::optional<std::size_t> arena, weights;
    items('}', [&] {
      auto [key, key_pos] = member_key();
      if (key == "arena_bytes" || key == "weights_bytes") {
        auto& slot = key == "arena_bytes" ? arena : weights;
        if (slot) fail_at(key_pos, "duplicate key \"" + key + "\"");
        slot = integer(key);
      } else {
        value(1);
      }
    });
    skip_ws();
    if (pos_ != text_.size()) fail("unexpected text after the top-level object");
    if (!arena) fail_at(0, "missing the top-level integer \"arena_bytes\"");
    return PlanSizes{*arena, weights.value_or(0)};
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw InvalidInput(name_ + ":" + std::to_string(line) + ":" + std::to_string(col) +
                       ": plan file: " + what);
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= text_.size(); }
  void expect(char c) {
    if (at_end() || text_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_ws() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                         text_[pos_] == '\r'))
      ++pos_;
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }

  // Only ASCII escapes are decoded; a key never needs more, and other strings are only checked.
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail_at(pos_ - 1, "control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          for (int i = 0; i < 4; ++i)
            if (at_end() || !is_hex(text_[pos_++])) fail_at(pos_ - 1, "bad \\u escape");
          out += '?';
          break;
        default:
          fail_at(pos_ - 1, std::string("bad escape '\\") + e + "'");
      }
    }
  }

  // JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void number() {
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (is_digit(peek())) {
      while (is_digit(peek())) ++pos_;
    } else {
      fail("malformed number");
    }
    if (peek() == '.') {
      ++pos_;
      if (!is_digit(peek())) fail("malformed number");
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail("malformed number");
      while (is_digit(peek())) ++pos_;
    }
  }

  std::size_t integer(const std::string& key) {
    const std::size_t start = pos_;
    if (peek() == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))
      fail_at(start, "\"" + key + "\" must be a non-negative integer without leading zeros");
    if (peek() == '-' || is_digit(peek())) {
      number();
      std::string_view token = text_.substr(start, pos_ - start);
      bool plain = token.find_first_not_of("0123456789") == std::string_view::npos;
      if (!plain || (token.size() > 1 && token[0] == '0'))
        fail_at(start, "\"" + key + "\" must be a non-negative integer, got " + std::string(token));
      std::size_t v = 0;
      for (char c : token) {
        if (__builtin_mul_overflow(v, std::size_t{10}, &v) ||
            __builtin_add_overflow(v, static_cast<std::size_t>(c - '0'), &v))
          fail_at(start, "\"" + key + "\" does not fit in 64 bits");
      }
      return v;
    }
    fail_at(start, "\"" + key + "\" must be a non-negative integer");
  }

  // The items of an object or an array, after its opening bracket, through `close`: `item`
  // reads one (a member or a value); a comma between two, none after the last.
  template <class Item>
  void items(char close, Item&& item) {
    skip_ws();
    if (peek() == close) {
      ++pos_;
      return;
    }
    while (true) {
      skip_ws();
      item();
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == close) {
        ++pos_;
        return;
      }
      fail(std::string("expected ',' or '") + close + "' after a value");
    }
  }

  // `"key":` of an object member; returns the key and where it starts, stops at the value.
  std::pair<std::string, std::size_t> member_key() {
    if (peek() != '"') fail("expected a key in double quotes");
    const std::size_t at = pos_;
    std::string key = string();
    skip_ws();
    expect(':');
    skip_ws();
    return {std::move(key), at};
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("unexpected character");
    pos_ += word.size();
  }

  void value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    char c = peek();
    if (c == '{') {
      ++pos_;
      items('}', [&] {
        member_key();
        value(depth + 1);
      });
      return;
    }
    if (c == '[') {
      ++pos_;
      items(']', [&] { value(depth + 1); });
      return;
    }
    if (c == '"') {
      string();
      return;
    }
    if (c == '-' || is_digit(c)) {
      number();
      return;
    }
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    if (at_end()) fail("unexpected end of file");
    fail("unexpected character");
  }

  std::string_view text_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

}  // namespace

std::size_t PlanSizes::total() const {
  return checked_add(arena_bytes, weights_bytes, "plan: arena_bytes + weights_bytes");
}

PlanSizes parse_plan_sizes(std::string_view json, const std::string& name) {
  return PlanFileReader(json, name).run();
}

PlanSizes read_plan_sizes(const std::string& path) {
  return parse_plan_sizes(core::read_input_file(path, "plan", core::kMaxPlanInput), path);
}

}  // namespace modelmem::plan
