// MiniMalloc-style CSV reader and writer (format in include/modelmem/plan_io.hpp).
//
// The reader is strict: every row is checked as it is read, so an error names the line where
// it is, and nothing malformed reaches a solver.
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/plan/mindspore_tracker.hpp"
#include "modelmem/plan/plan_io.hpp"

namespace modelmem::plan {
namespace {

enum class Column { kId, kLower, kUpper, kEnd, kSize, kAlignment, kOffset, kIgnored };

struct ColumnName {
  const char* name;
  Column column;
};
constexpr ColumnName kColumnNames[] = {
    {"id", Column::kId},         {"buffer", Column::kId},
    {"buffer_id", Column::kId},  {"lower", Column::kLower},
    {"start", Column::kLower},   {"begin", Column::kLower},
    {"upper", Column::kUpper},   {"end", Column::kEnd},
    {"size", Column::kSize},     {"alignment", Column::kAlignment},
    {"offset", Column::kOffset}, {"hint", Column::kIgnored},
    {"gaps", Column::kIgnored},
};

using core::printable;

using core::trim;

class Reader {
 public:
  Reader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  PlannedProblem read(bool need_offsets) {
    PlannedProblem out;
    out.problem.name = source_;
    if (!next_nonblank_line())
      fail_file("empty file: expected a header row such as id,lower,upper,size");
    read_header();
    if (need_offsets && !col_[static_cast<int>(Column::kOffset)])
      fail("missing column 'offset' (a plan file needs one)");

    std::unordered_map<std::string, std::size_t> first_line_of;
    std::size_t total = 0;
    std::vector<std::string> fields;
    while (next_nonblank_line()) {
      split(fields);
      if (fields.size() != header_size_)
        fail("has " + std::to_string(fields.size()) + " fields but the header has " +
             std::to_string(header_size_));
      Buffer b;
      b.id = fields[*col(Column::kId)];
      if (b.id.empty()) fail("empty id");
      b.start = time_value(fields, Column::kLower, "lower");
      if (col(Column::kUpper)) {
        b.end = time_value(fields, Column::kUpper, "upper");
        if (b.end <= b.start)
          fail("upper " + std::to_string(b.end) + " is not after lower " + std::to_string(b.start) +
               " (buffer '" + printable(b.id) + "')");
      } else {
        Time last = time_value(fields, Column::kEnd, "end");
        if (last < b.start)
          fail("end " + std::to_string(last) + " is before start " + std::to_string(b.start) +
               " (buffer '" + printable(b.id) + "')");
        if (last == std::numeric_limits<Time>::max())
          fail("end " + std::to_string(last) + " is too large");
        b.end = last + 1;
      }
      b.size = number(fields, Column::kSize, "size");
      if (b.size == 0) fail("size is zero (buffer '" + printable(b.id) + "')");
      if (col(Column::kAlignment)) {
        b.alignment = number(fields, Column::kAlignment, "alignment");
        if (b.alignment == 0) fail("alignment is zero (buffer '" + printable(b.id) + "')");
      }
      if (__builtin_add_overflow(total, b.size, &total))
        fail("the total size of the buffers overflows 64 bits");
      if (col(Column::kOffset)) {
        std::size_t offset = number(fields, Column::kOffset, "offset");
        std::size_t end_addr;
        if (__builtin_add_overflow(offset, b.size, &end_addr))
          fail("offset + size overflows 64 bits (buffer '" + printable(b.id) + "')");
        out.plan.offsets.push_back(offset);
        out.plan.arena_size = std::max(out.plan.arena_size, end_addr);
      }
      auto [it, inserted] = first_line_of.emplace(b.id, line_no_);
      if (!inserted)
        fail("duplicate id '" + printable(b.id) + "' (first on line " + std::to_string(it->second) +
             ")");
      out.problem.buffers.push_back(std::move(b));
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidInput(source_ + ":" + std::to_string(line_no_) + ": " + what);
  }
  [[noreturn]] void fail_file(const std::string& what) const {
    throw InvalidInput(source_ + ": " + what);
  }

  /// Advances to the next line that is not blank; false at the end of the text.
  bool next_nonblank_line() {
    while (pos_ < text_.size()) {
      std::size_t nl = text_.find('\n', pos_);
      if (nl == std::string_view::npos) nl = text_.size();
      line_ = text_.substr(pos_, nl - pos_);
      pos_ = nl + 1;
      ++line_no_;
      if (!line_.empty() && line_.back() == '\r') line_.remove_suffix(1);
      for (char ch : line_) {
        unsigned char c = static_cast<unsigned char>(ch);
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", c);
          fail(std::string("not a CSV text file (control byte ") + hex + ")");
        }
      }
      if (!trim(line_).empty()) return true;
    }
    return false;
  }

  /// Splits the current line at commas; a field in double quotes may hold commas and "".
  void split(std::vector<std::string>& fields) const {
    fields.clear();
    std::size_t i = 0;
    const std::string_view s = line_;
    while (true) {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
      std::string field;
      if (i < s.size() && s[i] == '"') {
        ++i;
        while (true) {
          if (i >= s.size()) fail("unterminated quoted field");
          if (s[i] == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          field += s[i++];
        }
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        if (i < s.size() && s[i] != ',')
          fail("unexpected text after the quoted field '" + printable(field) + "'");
      } else {
        std::size_t comma = s.find(',', i);
        if (comma == std::string_view::npos) comma = s.size();
        std::string_view raw = trim(s.substr(i, comma - i));
        if (raw.find('"') != std::string_view::npos)
          fail("stray quote in field '" + printable(raw) + "'");
        field = raw;
        i = comma;
      }
      fields.push_back(std::move(field));
      if (i >= s.size()) break;
      ++i;  // the comma
    }
  }

  void read_header() {
    std::vector<std::string> names;
    auto not_a_header = [&] {
      fail("not a MiniMalloc CSV header: expected columns id,lower,upper,size, got '" +
           printable(line_) + "'");
    };
    try {
      split(names);
    } catch (const InvalidInput&) {
      not_a_header();
    }
    header_size_ = names.size();
    std::vector<const ColumnName*> found(names.size(), nullptr);
    bool any_known = false;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::string name = names[i];
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (const ColumnName& cn : kColumnNames)
        if (name == cn.name) found[i] = &cn;
      any_known = any_known || found[i];
    }
    if (!any_known) not_a_header();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!found[i])
        fail("unknown column '" + printable(names[i]) +
             "' (known: id, lower, upper, end, size, alignment, offset, hint, gaps; "
             "aliases buffer, buffer_id, start, begin)");
      if (found[i]->column == Column::kIgnored) continue;
      auto& slot = col_[static_cast<int>(found[i]->column)];
      if (slot) fail("column '" + std::string(found[i]->name) + "' repeats an earlier column");
      slot = i;
    }
    if (col(Column::kUpper) && col(Column::kEnd))
      fail("both 'upper' (exclusive) and 'end' (inclusive) columns; give one");
    auto need = [&](Column c, const char* what) {
      if (!col(c))
        fail(std::string("missing column '") + what + "' (header: '" + printable(line_) + "')");
    };
    need(Column::kId, "id");
    need(Column::kLower, "lower");
    if (!col(Column::kEnd)) need(Column::kUpper, "upper");
    need(Column::kSize, "size");
  }

  std::optional<std::size_t> col(Column c) const { return col_[static_cast<int>(c)]; }

  std::uint64_t number(const std::vector<std::string>& fields, Column c, const char* name) const {
    const std::string& f = fields[*col(c)];
    if (f.empty()) fail(std::string("empty value in column '") + name + "'");
    if (f[0] == '-')
      fail(std::string("negative value ") + printable(f) + " in column '" + name + "'");
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail(std::string("value ") + printable(f) + " in column '" + name +
           "' does not fit in 64 bits");
    if (ec != std::errc() || end != f.data() + f.size())
      fail(std::string("'") + printable(f) + "' in column '" + name +
           "' is not a non-negative integer");
    return v;
  }

  /// Time steps may be negative (MindSpore's SOMAS files start tensors live before the first
  /// node at -1): only differences of times matter to the planner, and the file's own times are
  /// kept, so a plan written back has the same columns. Bounded by 2^62 either way so that
  /// differences and windows around a step never overflow.
  Time time_value(const std::vector<std::string>& fields, Column c, const char* name) const {
    const std::string& f = fields[*col(c)];
    constexpr Time kLimit = Time{1} << 62;
    if (!f.empty() && f[0] == '-') {
      Time v = 0;
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
      if (ec == std::errc::result_out_of_range ||
          (ec == std::errc() && end == f.data() + f.size() && v < -kLimit))
        fail(std::string("value ") + printable(f) + " in column '" + name +
             "' is too far below zero for a time step (at least -2^62)");
      if (ec != std::errc() || end != f.data() + f.size())
        fail(std::string("'") + printable(f) + "' in column '" + name + "' is not an integer");
      return v;
    }
    std::uint64_t v = number(fields, c, name);
    if (v > static_cast<std::uint64_t>(std::numeric_limits<Time>::max()))
      fail(std::string("value ") + std::to_string(v) + " in column '" + name +
           "' is too large for a time step");
    return static_cast<Time>(v);
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
  std::size_t line_no_ = 0;
  std::string_view line_;
  std::size_t header_size_ = 0;
  std::optional<std::size_t> col_[8];
};

std::string read_file(const std::filesystem::path& path) {
  return core::read_input_file(path.string(), "CSV", core::kMaxPlanInput);
}

void write_field(std::ostream& out, const std::string& s) {
  bool quote = s.empty() || s.find_first_of(",\"\r\n") != std::string::npos || s.front() == ' ' ||
               s.front() == '\t' || s.back() == ' ' || s.back() == '\t';
  if (!quote) {
    out << s;
    return;
  }
  out << '"';
  for (char c : s) {
    if (c == '"') out << '"';
    out << c;
  }
  out << '"';
}

}  // namespace

Problem parse_problem_csv(std::string_view text, const std::string& source) {
  if (is_tracker_blocks(text)) return tracker_problem(parse_tracker_blocks(text, source));
  return Reader(text, source).read(false).problem;
}

Problem read_problem_csv(const std::filesystem::path& path) {
  return parse_problem_csv(read_file(path), path.string());
}

PlannedProblem parse_plan_csv(std::string_view text, const std::string& source) {
  return Reader(text, source).read(true);
}

PlannedProblem read_plan_csv(const std::filesystem::path& path) {
  return parse_plan_csv(read_file(path), path.string());
}

PlannedProblem read_problem_and_plan_csv(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  if (is_tracker_blocks(text))  // MindSpore's memory_block.csv: a problem without offsets
    return {tracker_problem(parse_tracker_blocks(text, path.string())), {}};
  return Reader(text, path.string()).read(false);
}

void write_plan_csv(std::ostream& out, const Problem& problem, const Plan& plan) {
  if (plan.offsets.size() != problem.buffers.size())
    throw InvalidInput("plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                       std::to_string(problem.buffers.size()) + " buffers");
  bool aligned = false;
  for (const Buffer& b : problem.buffers) aligned = aligned || b.alignment > 1;
  out << "id,lower,upper,size" << (aligned ? ",alignment" : "") << ",offset\n";
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const Buffer& b = problem.buffers[i];
    write_field(out, b.id);
    out << ',' << b.start << ',' << b.end << ',' << b.size;
    if (aligned) out << ',' << b.alignment;
    out << ',' << plan.offsets[i] << '\n';
  }
}

}  // namespace modelmem::plan
