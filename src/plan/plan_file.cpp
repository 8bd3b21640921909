// A recursive-descent JSON checker that keeps only two top-level integers. Depth is bounded so a
// hostile file cannot overflow the stack; numbers are validated by the JSON grammar even where
// they are skipped.
#include "modelmem/plan/plan_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/plan/plan_json.hpp"
#include "modelmem/plan/problem.hpp"

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
    std::optional<std::size_t> arena, weights, total, version;
    std::optional<std::string> format;
    items('}', [&] {
      auto [key, key_pos] = member_key();
      if (key == "arena_bytes" || key == "weights_bytes" || key == "total_bytes" ||
          key == "version") {
        auto& slot = key == "arena_bytes"     ? arena
                     : key == "weights_bytes" ? weights
                     : key == "total_bytes"   ? total
                                              : version;
        if (slot) fail_at(key_pos, "duplicate key \"" + key + "\"");
        slot = integer(key);
      } else if (key == "format") {
        if (format) fail_at(key_pos, "duplicate key \"format\"");
        if (peek() != '"') fail("\"format\" must be a string");
        format = string();
      } else if (key == "buffers") {
        if (buffers_) fail_at(key_pos, "duplicate key \"buffers\"");
        buffers();
      } else {
        value(1);
      }
    });
    skip_ws();
    if (pos_ != text_.size()) fail("unexpected text after the top-level object");
    if (!arena) fail_at(0, "missing the top-level integer \"arena_bytes\"");
    // Checked before the sizes are used: a pool is sized from this file, a plan is a promise.
    if (format && *format != kPlanFormat)
      refuse("\"format\" is \"" + *format + "\", not \"" + std::string(kPlanFormat) + "\"");
    if (version && *version != static_cast<std::size_t>(kPlanFormatVersion))
      refuse("version " + std::to_string(*version) + " is not one this reader knows (" +
             std::to_string(kPlanFormatVersion) + ")");
    PlanSizes sizes{*arena, weights.value_or(0)};
    if (total) {
      std::size_t sum = 0;
      if (__builtin_add_overflow(sizes.arena_bytes, sizes.weights_bytes, &sum) || sum != *total)
        refuse("total_bytes " + std::to_string(*total) + " is not arena_bytes " +
               std::to_string(sizes.arena_bytes) + " + weights_bytes " +
               std::to_string(sizes.weights_bytes));
    }
    if (buffers_) check_buffers(*arena);
    return sizes;
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    throw InvalidInput(name_ + ": plan file: " + what);
  }

  // The buffers array: each an object with size, start, end, offset (non-negative integers
  // that fit 64 bits), an optional alignment (1) and id (its index).
  void buffers() {
    if (peek() != '[') fail("\"buffers\" must be an array");
    ++pos_;
    buffers_.emplace();
    items(']', [&] {
      const std::size_t index = buffers_->buffers.size();
      const std::string label = "buffers[" + std::to_string(index) + "]";
      if (peek() != '{') fail(label + " must be an object");
      const std::size_t at = pos_++;
      Buffer b;
      std::optional<std::size_t> size, start, end, offset, alignment;
      std::optional<std::string> id;
      items('}', [&] {
        auto [key, key_pos] = member_key();
        std::optional<std::size_t>* slot = key == "size"        ? &size
                                           : key == "start"     ? &start
                                           : key == "end"       ? &end
                                           : key == "offset"    ? &offset
                                           : key == "alignment" ? &alignment
                                                                : nullptr;
        if (slot != nullptr) {
          if (*slot) fail_at(key_pos, label + ": duplicate key \"" + key + "\"");
          *slot = integer(label + "." + key);
        } else if (key == "id") {
          if (peek() != '"') fail(label + ".id must be a string");
          id = string();
        } else {
          value(2);
        }
      });
      b.id = id.value_or("#" + std::to_string(index));
      for (auto [slot, key] : {std::pair{&size, "size"}, std::pair{&start, "start"},
                               std::pair{&end, "end"}, std::pair{&offset, "offset"}})
        if (!*slot) fail_at(at, label + " ('" + b.id + "') has no \"" + key + "\"");
      for (auto [value, key] : {std::pair{*start, "start"}, std::pair{*end, "end"}})
        if (value > static_cast<std::size_t>(std::numeric_limits<Time>::max()))
          fail_at(at, label + " ('" + b.id + "'): " + key + " " + std::to_string(value) +
                          " does not fit a signed 64-bit step");
      b.size = *size;
      b.start = static_cast<Time>(*start);
      b.end = static_cast<Time>(*end);
      b.alignment = alignment.value_or(1);
      buffers_->buffers.push_back(std::move(b));
      offsets_.push_back(*offset);
    });
  }

  // The buffers against each other and the arena: each well formed, inside the arena, aligned,
  // and no two overlapping in address while both are live; the arena where the last one ends.
  void check_buffers(std::size_t arena) const {
    const auto& bufs = buffers_->buffers;
    auto named = [&](std::size_t i) {
      return "buffer " + std::to_string(i) + " ('" + bufs[i].id + "')";
    };
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      std::size_t end = 0;
      if (__builtin_add_overflow(offsets_[i], bufs[i].size, &end))
        refuse(named(i) + ": offset " + std::to_string(offsets_[i]) + " + size " +
               std::to_string(bufs[i].size) + " overflows 64 bits");
      if (end > arena)
        refuse(named(i) + ": offset " + std::to_string(offsets_[i]) + " + size " +
               std::to_string(bufs[i].size) + " = " + std::to_string(end) +
               " passes the arena of " + std::to_string(arena) + " bytes");
    }
    try {
      check_problem(*buffers_);
    } catch (const InvalidInput& e) {
      refuse(e.what());
    }
    const Validation v = validate(*buffers_, Plan{offsets_, arena}, false);
    if (!v) refuse(v.message);
  }

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
  std::optional<Problem> buffers_;  // the plan's buffers, when it lists them
  std::vector<std::size_t> offsets_;
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
