// A YAML (or JSON, which YAML includes) document read into nlohmann::json with libyaml: the
// small input files of `modelmem place` (models, devices). Plain scalars that read as whole
// numbers become numbers, true/false booleans, null/~ null; anchors and tags are refused.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace modelmem::sizing {

/// Parses `text`; InvalidInput naming `what` (the file) and the line of the error.
nlohmann::json parse_yaml(const std::string& text, const std::string& what);

/// Reads and parses the file at `path`; InvalidInput when it cannot be read.
nlohmann::json read_yaml_file(const std::string& path);

}  // namespace modelmem::sizing
