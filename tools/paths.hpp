// Checks of the files a command reads and writes, done before any work or output so that a bad
// path is one line of error and nothing else (exit code 2, InvalidInput).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "modelmem/core/error.hpp"

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

/// `path` can be created or overwritten: not a directory, its folder exists and is writable.
inline void check_output_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw InvalidInput("an empty output file name");
  if (fs::is_directory(path, ec))
    throw InvalidInput(path + ": is a directory, not a file to write");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec))
    throw InvalidInput(path + ": cannot write: folder " + folder.string() + " does not exist");
  if (fs::exists(path, ec) ? ::access(path.c_str(), W_OK) != 0
                           : ::access(folder.c_str(), W_OK | X_OK) != 0)
    throw InvalidInput(path + ": cannot write: permission denied");
}

}  // namespace modelmem::tools
