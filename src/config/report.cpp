// What `modelmem config` prints (modelmem/config/factory.hpp): the keys, the stack built, the
// probe and the fallback, for the command line and the Python package alike.
#include <cstdarg>
#include <cstdio>
#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"

namespace modelmem::config {
namespace {

// Appends printf-style text to `out`.
__attribute__((format(printf, 2, 3))) void append(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, again);
    out.resize(at + static_cast<std::size_t>(n));
  }
  va_end(again);
}

// Table cells may not hold a bare '|'.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string config_report(const std::string& text, const std::string& from) {
  const Config config = parse_config(text);
  // Built before anything is written: a string the factory rejects gives its one error alone.
  const Built built = build(config);
  std::string out;
  append(out, "config: \"%s\" (from %s)\n", text.c_str(), from.c_str());
  out += "keys (* = given):\n";
  for (const auto& k : config_keys()) {
    const std::string v = config.get(k.name);
    append(out, "  %c %-30s %s\n", config.has(k.name) ? '*' : ' ', k.name.c_str(),
           v.empty() ? "-" : v.c_str());
  }
  out += "stack:\n";
  for (const auto& [key, value] : built.settings)
    append(out, "    %-30s %s\n", key.c_str(), value.c_str());
  append(out, "probe:     %s\n", built.probe.c_str());
  append(out, "fallback:  %s\n", built.fallback_warning ? built.fallback_warning->c_str() : "none");
  append(out, "allocator: %s\n", built.allocator->describe().c_str());
  return out;
}

std::string keys_markdown() {
  std::string out = "| key | default | values | meaning |\n|---|---|---|---|\n";
  for (const auto& k : config_keys())
    append(out, "| `%s` | %s | %s | %s |\n", k.name.c_str(),
           k.default_value.empty() ? "-" : ("`" + k.default_value + "`").c_str(),
           cell(k.values).c_str(), cell(k.meaning).c_str());
  return out;
}

}  // namespace modelmem::config
