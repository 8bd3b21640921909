// Output files: the check of a path before any work, and the two ways of writing one (opened in
// place for traces, or through a temporary file renamed into place). Input files: regular,
// bounded, opened without blocking.
#include "modelmem/core/files.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::core {

namespace {

// The process's umask without changing it (umask(2) can only read it by setting it, a race
// with other threads): Linux shows it in /proc/self/status since 4.7; 022 where it does not.
mode_t current_umask() noexcept {
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 022;
  char buffer[4096];
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return 022;
  buffer[n] = '\0';
  const char* at = std::strstr(buffer, "Umask:");
  return at == nullptr ? 022 : static_cast<mode_t>(std::strtoul(at + 6, nullptr, 8));
}

}  // namespace

int open_output_file(const char* path, unsigned mode, const char** why) noexcept {
  const char* ignored = nullptr;
  if (why == nullptr) why = &ignored;
  // O_NONBLOCK: opening a FIFO planted at the name must not wait for a reader.
  int fd = ::open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                  static_cast<mode_t>(mode));
  if (fd < 0) {
    *why = errno == ELOOP ? "it is a symbolic link (not followed)" : std::strerror(errno);
    return -1;
  }
  struct stat st {};
  const char* refused = nullptr;
  if (::fstat(fd, &st) != 0)
    refused = "cannot stat it";
  else if (!S_ISREG(st.st_mode))
    refused = "it is not a regular file";
  else if (st.st_uid != ::geteuid())
    refused = "it belongs to another user";
  else if (st.st_nlink > 1)
    refused = "it has another hard link";
  if (refused == nullptr) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || ::ftruncate(fd, 0) != 0 ||
        ::fchmod(fd, static_cast<mode_t>(mode)) != 0)
      refused = std::strerror(errno);
  }
  if (refused != nullptr) {
    int saved = errno == 0 ? EPERM : errno;
    ::close(fd);
    errno = saved;
    *why = refused;
    return -1;
  }
  return fd;
}

void write_file_replacing(const std::string& path, std::string_view text, unsigned mode) {
  if (path.empty()) throw InvalidInput("an empty output file name");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw InvalidInput(path + ": is a directory, not a file to write");
  const std::size_t slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  std::string temp = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
                     "." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".XXXXXX";
  int fd = ::mkstemp(temp.data());
  if (fd < 0)
    throw InvalidInput(path + ": cannot write: folder " + folder + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const int saved = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error(path + ": " + what + ": " + std::strerror(saved));
  };
  if (::fchmod(fd, static_cast<mode_t>(mode & ~current_umask())) != 0) fail("cannot set its mode");
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    throw Error(path + ": write failed: " + std::strerror(saved));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    throw InvalidInput(path + ": cannot write: " + std::strerror(saved));
  }
}

std::string output_file_problem(const std::string& path, OutputWrite how) {
  if (path.empty()) return "an empty file name";
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "it is a directory";
    if (how == OutputWrite::kInPlace) {
      // What open_output_file refuses, said before the work that would write the file.
      if (S_ISLNK(st.st_mode)) return "it is a symbolic link (not followed)";
      if (!S_ISREG(st.st_mode)) return "it is not a regular file";
      if (st.st_uid != ::geteuid()) return "it belongs to another user";
      if (st.st_nlink > 1) return "it has another hard link";
      if (::access(path.c_str(), W_OK) != 0) return std::strerror(errno);
      return "";
    }
  }
  const std::size_t slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::stat(folder.c_str(), &st) != 0) return "folder " + folder + " does not exist";
  if (!S_ISDIR(st.st_mode)) return folder + " is not a folder";
  // Replacing needs the folder (a temporary file is renamed into place), in place the file too.
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return "folder " + folder + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

void check_output_file(const std::string& path, OutputWrite how, const std::string& what) {
  const std::string problem = output_file_problem(path, how);
  if (problem.empty()) return;
  const std::string head = what.empty() ? "" : what + " ";
  if (path.empty()) throw InvalidInput(head + "an empty output file name");
  throw InvalidInput(head + path + ": cannot write: " + problem);
}

namespace {

// What a file that is not regular is, for the message.
const char* not_regular(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// "a plan", "an ONNX model".
std::string a_kind(const std::string& kind) {
  const bool vowel = !kind.empty() && std::strchr("AEIOUaeiou", kind.front()) != nullptr;
  return (vowel ? "an " : "a ") + kind;
}

// Opens `path` for reading without blocking and checks the descriptor; returns it and its size.
int open_input(const std::string& path, const std::string& kind, std::uint64_t max_bytes,
               std::uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) throw InvalidInput(path + ": cannot open: no such " + kind + " file");
    throw InvalidInput(path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    throw InvalidInput(path + ": cannot open: " + std::strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InvalidInput(path + ": is " + not_regular(st.st_mode) + ", not " + a_kind(kind) +
                       " file");
  }
  *size = static_cast<std::uint64_t>(st.st_size);
  if (*size > max_bytes) {
    ::close(fd);
    throw InvalidInput(path + ": " + format_bytes(*size) + ", more than " + a_kind(kind) +
                       " file may hold (" + format_bytes(max_bytes) + ")");
  }
  return fd;
}

}  // namespace

void check_input_file(const std::string& path, const std::string& kind, std::uint64_t max_bytes) {
  std::uint64_t size = 0;
  ::close(open_input(path, kind, max_bytes, &size));
}

std::string read_input_file(const std::string& path, const std::string& kind,
                            std::uint64_t max_bytes) {
  std::uint64_t size = 0;
  const int fd = open_input(path, kind, max_bytes, &size);
  std::string text;
  try {
    text.reserve(static_cast<std::size_t>(size));
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw InvalidInput(path + ": read error: " + std::strerror(errno));
      if (n == 0) break;
      if (text.size() + static_cast<std::size_t>(n) > max_bytes)
        throw InvalidInput(path + ": grew past what " + a_kind(kind) + " file may hold (" +
                           format_bytes(max_bytes) + ") while it was read");
      text.append(buffer, static_cast<std::size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

}  // namespace modelmem::core
