// Checks of the files a command reads and writes, done before any work or output so that a bad
// path is one line of error and nothing else (exit code 2, InvalidInput).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace modelmem::tools {

/// `path` names a readable regular file (not a directory, not missing).
inline void check_input_file(const std::string& path, const char* what = "file") {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InvalidInput(path + ": no such " + what);
  if (fs::is_directory(st)) throw InvalidInput(path + ": is a directory, not a " + what);
  if (::access(path.c_str(), R_OK) != 0) throw InvalidInput(path + ": cannot read the " + what);
}

/// `path` can be written (core/files.hpp: the one output check, shared with `modelmem run`'s
/// preflight and Python's trace recordings).
using core::check_output_file;

}  // namespace modelmem::tools
