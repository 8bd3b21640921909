// Running a shell command from a test: what it wrote to standard output and how it exited.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace modelmem::testing {

struct CommandResult {
  int code = -1;    ///< exit status; -1 when the command could not start or did not exit
  std::string out;  ///< standard output (add " 2>&1" to the command for its errors too)
};

/// Runs `command` through /bin/sh and reads all its standard output.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace modelmem::testing
