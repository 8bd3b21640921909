// YAML into nlohmann::json through libyaml's event parser (src/sizing/yaml_json.hpp).
#include "sizing/yaml_json.hpp"

#include <fmt/format.h>
#include <yaml.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace modelmem::sizing {
namespace {

using nlohmann::json;

struct Parser {
  yaml_parser_t parser{};
  std::string what;
  Parser() { yaml_parser_initialize(&parser); }
  ~Parser() { yaml_parser_delete(&parser); }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
};

struct Event {
  yaml_event_t event{};
  bool held = false;
  ~Event() {
    if (held) yaml_event_delete(&event);
  }
};

[[noreturn]] void fail(const Parser& p, std::size_t line, const std::string& why) {
  throw InvalidInput(fmt::format("{}:{}: {}", p.what, line + 1, why));
}

void next(Parser& p, Event& e) {
  if (e.held) yaml_event_delete(&e.event), e.held = false;
  if (!yaml_parser_parse(&p.parser, &e.event)) {
    const char* problem = p.parser.problem ? p.parser.problem : "not valid YAML";
    fail(p, p.parser.problem_mark.line, fmt::format("not valid YAML or JSON: {}", problem));
  }
  e.held = true;
}

json scalar(const yaml_event_t& ev) {
  const std::string text(reinterpret_cast<const char*>(ev.data.scalar.value),
                         ev.data.scalar.length);
  if (ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return text;
  if (text == "true" || text == "True") return true;
  if (text == "false" || text == "False") return false;
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  long long n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && end == text.data() + text.size()) return n;
  double d = 0;
  auto [dend, dec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (dec == std::errc() && dend == text.data() + text.size()) return d;
  return text;
}

json node_from(Parser& p, Event& e, int depth) {
  if (depth > 64) fail(p, e.event.start_mark.line, "nested too deeply");
  const yaml_event_t& ev = e.event;
  switch (ev.type) {
    case YAML_SCALAR_EVENT:
      if (ev.data.scalar.anchor) fail(p, ev.start_mark.line, "anchors are not supported");
      return scalar(ev);
    case YAML_SEQUENCE_START_EVENT: {
      json out = json::array();
      for (;;) {
        next(p, e);
        if (e.event.type == YAML_SEQUENCE_END_EVENT) return out;
        out.push_back(node_from(p, e, depth + 1));
      }
    }
    case YAML_MAPPING_START_EVENT: {
      json out = json::object();
      for (;;) {
        next(p, e);
        if (e.event.type == YAML_MAPPING_END_EVENT) return out;
        const std::size_t line = e.event.start_mark.line;
        json key = node_from(p, e, depth + 1);
        if (!key.is_string() && !key.is_number())
          fail(p, line, "a mapping key must be a word or a number");
        const std::string k = key.is_string() ? key.get<std::string>() : key.dump();
        next(p, e);
        json value = node_from(p, e, depth + 1);
        if (out.contains(k)) fail(p, line, fmt::format("key '{}' given twice", k));
        out[k] = std::move(value);
      }
    }
    case YAML_ALIAS_EVENT:
      fail(p, ev.start_mark.line, "aliases are not supported");
    default:
      fail(p, ev.start_mark.line, "unexpected YAML event");
  }
}

}  // namespace

json parse_yaml(const std::string& text, const std::string& what) {
  Parser p;
  p.what = what;
  yaml_parser_set_input_string(&p.parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  Event e;
  next(p, e);  // stream start
  next(p, e);
  if (e.event.type == YAML_STREAM_END_EVENT) throw InvalidInput(what + ": empty file");
  if (e.event.type != YAML_DOCUMENT_START_EVENT) fail(p, e.event.start_mark.line, "no document");
  next(p, e);
  json out = node_from(p, e, 0);
  next(p, e);  // document end
  next(p, e);
  if (e.event.type != YAML_STREAM_END_EVENT)
    fail(p, e.event.start_mark.line, "holds more than one document");
  return out;
}

json read_yaml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InvalidInput(path + ": is a directory");
  return parse_yaml(core::read_input_file(path, "YAML", core::kMaxTextInput), path);
}

}  // namespace modelmem::sizing
