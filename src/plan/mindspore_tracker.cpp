// MindSpore's memory_block.csv (format and sources in include/modelmem/plan/mindspore_tracker.hpp).
#include "modelmem/plan/mindspore_tracker.hpp"

#include <charconv>
#include <cstdio>
#include <limits>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::plan {
namespace {

using core::printable;

constexpr std::int64_t kNeverFreed = std::numeric_limits<std::int64_t>::max();
constexpr std::size_t kWarningsKept = 5;

enum Col { kStart, kEnd, kSize, kAddress, kStream, kPool, kType, kNode, kStack, kCols };
constexpr const char* kColNames[kCols] = {
    "start_time_stamp", "end_time_stamp", "size",      "device_addr", "stream_id",
    "pool_type",        "type",           "node_name", "python_stack"};

struct BadRow {
  std::string message;
};

// Lines without their end (CR of a CRLF file included); `next` false at the end of the text.
class Lines {
 public:
  Lines(std::string_view text, std::size_t first) : text_(text), number_(first - 1) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    std::size_t nl = text_.find('\n', pos_);
    if (nl == std::string_view::npos) nl = text_.size();
    line = text_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    ++number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
  }
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t number_;
};

std::optional<unsigned char> control_byte(std::string_view line) {
  for (char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return c;
  }
  return std::nullopt;
}

// Splits at commas; a field in double quotes (what a CSV library writes) may hold commas and "".
// MindSpore itself quotes nothing. Throws BadRow for an unterminated quote.
std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> fields;
  std::size_t i = 0;
  for (;;) {
    std::string field;
    if (i < s.size() && s[i] == '"') {
      for (++i;; ++i) {
        if (i >= s.size()) throw BadRow{"unterminated quoted field"};
        if (s[i] == '"') {
          if (i + 1 < s.size() && s[i + 1] == '"') {
            field += '"';
            ++i;
            continue;
          }
          ++i;
          break;
        }
        field += s[i];
      }
      while (i < s.size() && s[i] != ',') ++i;  // text after the closing quote is dropped
    } else {
      const std::size_t comma = std::min(s.find(',', i), s.size());
      field = core::trim(s.substr(i, comma - i), " \t");
      i = comma;
    }
    fields.push_back(std::move(field));
    if (i >= s.size()) return fields;
    ++i;
  }
}

std::optional<std::size_t> find(const std::vector<std::string>& names, std::string_view name) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  return std::nullopt;
}

// Time stamps up to 2^53 (a run of that many operations is far beyond any real one; the trace
// shows a tick as 1000 ns, which must fit in 64 bits), and the never-freed INT64_MAX.
std::int64_t stamp(std::string_view f, const char* column) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || end != f.data() + f.size())
    throw BadRow{std::string("column '") + column + "': '" + printable(f) +
                 "' is not a whole number (a time stamp)"};
  if (v > (std::int64_t{1} << 53) && v != kNeverFreed)
    throw BadRow{std::string("column '") + column + "': " + std::to_string(v) +
                 " is too large for a time stamp (at most 2^53, or 9223372036854775807 for a "
                 "block never freed)"};
  return v;
}

std::uint64_t unsigned_value(std::string_view f, const char* column) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw BadRow{std::string("column '") + column + "': " + printable(f) +
                 " does not fit in 64 bits"};
  if (f.empty() || ec != std::errc() || end != f.data() + f.size())
    throw BadRow{std::string("column '") + column + "': '" + printable(f) +
                 "' is not a non-negative whole number"};
  return v;
}

std::optional<std::uintptr_t> address(std::string_view f) {
  if (f.empty() || f == "0" || f == "(nil)" || f == "nil") return std::nullopt;
  std::uintptr_t v = 0;
  const bool hex = f.size() > 2 && f[0] == '0' && (f[1] == 'x' || f[1] == 'X');
  const std::string_view digits = hex ? f.substr(2) : f;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
  if (!hex || ec != std::errc() || end != digits.data() + digits.size())
    throw BadRow{"column 'device_addr': '" + printable(f) + "' is not an address (0x...)"};
  if (v == 0) return std::nullopt;
  return v;
}

}  // namespace

bool is_tracker_blocks(std::string_view text) {
  Lines lines(text, 1);
  std::string_view line;
  while (lines.next(line)) {
    if (core::trim(line, " \t").empty()) continue;
    if (control_byte(line)) return false;
    std::vector<std::string> names;
    try {
      names = split(line);
    } catch (const BadRow&) {
      return false;
    }
    return find(names, kColNames[kStart]) && find(names, kColNames[kEnd]) &&
           find(names, kColNames[kSize]);
  }
  return false;
}

TrackerFile parse_tracker_blocks(std::string_view text, const std::string& source,
                                 std::size_t first_line, bool skip_bad) {
  TrackerFile out;
  out.name = source;
  Lines lines(text, first_line);
  std::string_view line;
  std::vector<std::string> header;
  std::optional<std::size_t> col[kCols];
  std::size_t bad_kept = 0;
  auto at = [&](std::size_t n) { return source + ":" + std::to_string(n) + ": "; };

  while (lines.next(line)) {
    if (core::trim(line, " \t").empty()) continue;
    if (auto c = control_byte(line)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", *c);
      throw InvalidInput(at(lines.number()) + "not a CSV text file (control byte " + hex + ")");
    }
    if (header.empty()) {
      try {
        header = split(line);
      } catch (const BadRow& e) {
        throw InvalidInput(at(lines.number()) + e.message);
      }
      if (header.size() > 1 && header.back().empty()) header.pop_back();  // the trailing comma
      for (int c = 0; c < kCols; ++c) col[c] = find(header, kColNames[c]);
      for (int c : {kStart, kEnd, kSize})
        if (!col[c])
          throw InvalidInput(at(lines.number()) + "missing column '" + kColNames[c] +
                             "' (a MindSpore memory_block.csv starts start_time_stamp,"
                             "end_time_stamp,device_addr,stream_id,pool_type,size,...; got '" +
                             printable(line) + "')");
      continue;
    }
    try {
      std::vector<std::string> f = split(line);
      if (f.size() > header.size() && f.back().empty()) f.pop_back();  // the trailing comma
      if (f.size() > header.size() && col[kStack]) {
        // Commas inside python_stack: the extra fields are part of it.
        const std::size_t p = *col[kStack], extra = f.size() - header.size();
        for (std::size_t k = 1; k <= extra; ++k) f[p] += "," + f[p + k];
        f.erase(f.begin() + static_cast<std::ptrdiff_t>(p + 1),
                f.begin() + static_cast<std::ptrdiff_t>(p + 1 + extra));
      }
      if (f.size() != header.size())
        throw BadRow{std::to_string(f.size()) + " fields where the header has " +
                     std::to_string(header.size())};
      auto field = [&](Col c) -> const std::string& {
        static const std::string none;
        return col[c] ? f[*col[c]] : none;
      };
      TrackerBlock b;
      b.line = lines.number();
      b.start = stamp(field(kStart), kColNames[kStart]);
      const std::int64_t end = stamp(field(kEnd), kColNames[kEnd]);
      if (b.start == -1 && end == -1) {
        ++out.inside_somas;
        continue;
      }
      if (b.start == kNeverFreed)
        throw BadRow{"column 'start_time_stamp': " + std::to_string(b.start) + " is too large"};
      if (b.start < 0)
        throw BadRow{"column 'start_time_stamp': " + std::to_string(b.start) +
                     " is negative (only SOMAS's inner tensors have -1, with end_time_stamp -1)"};
      if (end != kNeverFreed) {
        if (end <= b.start)
          throw BadRow{"column 'end_time_stamp': " + std::to_string(end) +
                       " is not after start_time_stamp " + std::to_string(b.start)};
        b.end = end;
      }
      b.size = unsigned_value(field(kSize), kColNames[kSize]);
      b.address = address(field(kAddress));
      if (!field(kStream).empty()) b.stream = unsigned_value(field(kStream), kColNames[kStream]);
      if (field(kPool) == "CPU") {
        ++out.host_rows;
        continue;
      }
      if (b.size == 0) {
        ++out.zero_size;
        continue;
      }
      b.type = field(kType);
      b.node = field(kNode);
      out.last_stamp = std::max(out.last_stamp, b.end.value_or(b.start));
      out.blocks.push_back(std::move(b));
    } catch (const BadRow& e) {
      const std::string message = at(lines.number()) + e.message;
      if (!skip_bad) throw InvalidInput(message + " (--skip-bad skips malformed lines)");
      ++out.skipped_lines;
      if (bad_kept++ < kWarningsKept) out.warnings.push_back(message + "; line skipped");
    }
  }
  if (header.empty()) throw InvalidInput(source + ": empty file, no memory_block.csv header");
  if (out.skipped_lines > kWarningsKept)
    out.warnings.push_back("... and " + std::to_string(out.skipped_lines - kWarningsKept) +
                           " more malformed lines skipped");
  if (out.inside_somas > 0)
    out.warnings.push_back(source + ": " + std::to_string(out.inside_somas) +
                           " rows placed inside a SOMAS block (time stamps -1) not counted: the "
                           "block they sit in is counted whole");
  if (out.host_rows > 0)
    out.warnings.push_back(source + ": " + std::to_string(out.host_rows) +
                           " rows of pool CPU (host memory) skipped");
  if (out.zero_size > 0)
    out.warnings.push_back(source + ": " + std::to_string(out.zero_size) +
                           " blocks of 0 bytes skipped");
  return out;
}

Problem tracker_problem(const TrackerFile& file) {
  if (file.blocks.empty())
    throw InvalidInput(file.name + ": no device memory block to plan (" +
                       std::to_string(file.inside_somas) + " rows inside SOMAS blocks, " +
                       std::to_string(file.host_rows) + " of pool CPU, " +
                       std::to_string(file.zero_size) + " of 0 bytes)");
  Problem p;
  p.name = file.name;
  p.buffers.reserve(file.blocks.size());
  for (const TrackerBlock& b : file.blocks) {
    Buffer buffer;
    buffer.id = "L" + std::to_string(b.line);
    buffer.size = b.size;
    buffer.start = b.start;
    buffer.end = b.end.value_or(file.last_stamp + 1);
    p.buffers.push_back(std::move(buffer));
  }
  check_problem(p);  // the total size must fit in 64 bits
  return p;
}

}  // namespace modelmem::plan
