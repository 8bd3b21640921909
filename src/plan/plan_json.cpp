// The plan file writer: the standard members in a fixed order, then the caller's extras. Built
// from strings so that the plan layer needs no JSON library.
#include "modelmem/plan/plan_json.hpp"

#include <array>
#include <ostream>
#include <sstream>

#include "modelmem/core/error.hpp"

namespace modelmem::plan {

namespace {

constexpr std::array<std::string_view, 11> kStandardMembers = {
    "format",         "version",        "source",      "solver",
    "arena_bytes",    "weights_bytes",  "total_bytes", "lower_bound_bytes",
    "proven_optimal", "capacity_bytes", "buffers"};

}  // namespace

std::string json_quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

void write_plan_json(std::ostream& out, const Problem& problem, const Plan& plan,
                     const PlanInfo& info) {
  if (plan.offsets.size() != problem.buffers.size())
    throw InvalidInput("plan file: " + std::to_string(plan.offsets.size()) + " offsets for " +
                       std::to_string(problem.buffers.size()) + " buffers");
  for (const auto& [name, value] : info.extra) {
    for (std::string_view standard : kStandardMembers)
      if (name == standard)
        throw InvalidInput("plan file: extra member \"" + name + "\" repeats a standard one");
    if (value.empty()) throw InvalidInput("plan file: extra member \"" + name + "\" has no value");
  }
  std::ostringstream s;
  s << "{\n";
  s << "  \"format\": " << json_quote(kPlanFormat) << ",\n";
  s << "  \"version\": " << kPlanFormatVersion << ",\n";
  s << "  \"source\": " << json_quote(info.source) << ",\n";
  s << "  \"solver\": " << json_quote(info.solver) << ",\n";
  s << "  \"arena_bytes\": " << plan.arena_size << ",\n";
  s << "  \"weights_bytes\": " << info.weights_bytes << ",\n";
  s << "  \"total_bytes\": " << checked_add(plan.arena_size, info.weights_bytes, "plan size")
    << ",\n";
  s << "  \"lower_bound_bytes\": " << info.lower_bound << ",\n";
  s << "  \"proven_optimal\": " << (info.proven_optimal ? "true" : "false") << ",\n";
  s << "  \"capacity_bytes\": ";
  if (info.capacity)
    s << *info.capacity;
  else
    s << "null";
  s << ",\n  \"buffers\": [";
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const Buffer& b = problem.buffers[i];
    s << (i == 0 ? "\n" : ",\n") << "    {\"id\": " << json_quote(b.id) << ", \"size\": " << b.size
      << ", \"alignment\": " << b.alignment << ", \"start\": " << b.start << ", \"end\": " << b.end
      << ", \"offset\": " << plan.offsets[i] << "}";
  }
  s << (problem.buffers.empty() ? "]" : "\n  ]");
  for (const auto& [name, value] : info.extra) {
    s << ",\n  " << json_quote(name) << ": ";
    for (char c : value) {  // a multi-line value is indented under its member
      s << c;
      if (c == '\n') s << "  ";
    }
  }
  s << "\n}\n";
  out << s.str();
}

std::string plan_json_text(const Problem& problem, const Plan& plan, const PlanInfo& info) {
  std::ostringstream out;
  write_plan_json(out, problem, plan, info);
  return out.str();
}

}  // namespace modelmem::plan
