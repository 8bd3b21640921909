// Reading every process's published pools, with the checks a reader owes itself
// (monitor/reader.hpp).
#include "modelmem/monitor/reader.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "modelmem/monitor/publisher.hpp"

namespace modelmem::monitor {
namespace {

enum class Liveness { kAlive, kGone, kReused };

Liveness liveness(const ProcessSnapshot& p) {
  if (p.pid <= 0) return Liveness::kGone;
  if (kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH) return Liveness::kGone;
  std::uint64_t ticks = process_start_ticks(p.pid);
  if (p.proc_start_ticks != 0 && ticks != 0 && ticks != p.proc_start_ticks) {
    return Liveness::kReused;
  }
  return Liveness::kAlive;
}

// Reads exactly `bytes` at `offset`; false when the file was shorter (truncated meanwhile).
bool read_exact(int fd, void* out, std::size_t bytes, off_t offset) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

// Whether `uid` is the real or effective user of process `pid` (/proc/PID/status: the owner
// of /proc/PID itself is root for a process that changed its credentials).
bool process_runs_as(std::int64_t pid, std::uint64_t uid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    std::uint64_t real = 0, effective = 0;
    fields >> real >> effective;
    return fields && (real == uid || effective == uid);
  }
  return false;
}

// What one file gave: a snapshot, or a note saying why not.
struct FileRead {
  std::optional<ProcessSnapshot> snapshot;
  bool torn = false;
  bool removable = false;  // a regular file of ours (or we are root)
  std::string note;
  std::string torn_name;  // a torn segment's process name (written once, at its creation)
};

FileRead read_file(int dir_fd, const std::string& name, const std::string& shown,
                   unsigned max_wait_us) {
  FileRead out;
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.note = shown + ": cannot open: " + std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    out.note = shown + ": cannot stat: " + std::strerror(errno);
    close(fd);
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.note = shown + ": not a regular file";
    close(fd);
    return out;
  }
  out.removable = st.st_uid == geteuid() || geteuid() == 0;
  // root reads every user's segments (each checked against its process's owner below);
  // anyone else only their own.
  const bool foreign = st.st_uid != geteuid();
  if (foreign && geteuid() != 0) {
    out.note = shown + ": owned by uid " + std::to_string(st.st_uid) + ", not us";
    close(fd);
    return out;
  }
  if ((st.st_mode & 0077) != 0) {
    out.note = shown + ": readable or writable by others (mode " +
               std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
               std::to_string(st.st_mode & 7) + ")";
    close(fd);
    return out;
  }
  std::size_t bytes = static_cast<std::size_t>(st.st_size);
  if (bytes == 0 || bytes > segment_bytes(kMaxPoolCapacity)) {
    out.note = shown + ": bad size " + std::to_string(bytes) + " bytes";
    close(fd);
    return out;
  }
  // A copy read with pread, never a mapping: a segment truncated while it is read (by its
  // owner, or by anyone who can write it) then gives a short read and a note, not SIGBUS.
  // The copy is consistent when the sequence word was even and unchanged across it.
  std::vector<std::uint64_t> copy((bytes + 7) / 8);
  const off_t seq_offset = static_cast<off_t>(segment_sequence_offset());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(max_wait_us);
  bool consistent = false;
  for (;;) {
    std::uint64_t before = 1, after = 0;
    if (!read_exact(fd, &before, 8, seq_offset) || !read_exact(fd, copy.data(), bytes, 0) ||
        !read_exact(fd, &after, 8, seq_offset)) {
      out.note = shown + ": changed while it was read (truncated to fewer than " +
                 std::to_string(bytes) + " bytes); skipped";
      close(fd);
      return out;
    }
    if (before == after && (before & 1) == 0) {
      consistent = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  close(fd);
  ReadResult r = read_segment(copy.data(), bytes, consistent ? max_wait_us : 0);
  if (r.snapshot && foreign &&
      (r.snapshot->uid != st.st_uid || !process_runs_as(r.snapshot->pid, st.st_uid))) {
    out.note = shown + ": owned by uid " + std::to_string(st.st_uid) +
               ", which does not own the process it names; skipped";
    return out;
  }
  if (r.snapshot) {
    r.snapshot->segment = "/" + name;
    out.snapshot = std::move(r.snapshot);
    return out;
  }
  out.torn = r.torn;
  out.note = shown + ": " + r.problem;
  if (r.torn && !foreign) {
    // A writer killed between its sequence words leaves the segment torn for good; its
    // identity (pid, process name) was written when it was made and never changes, so the
    // copy still names the process for the stale report.
    copy[seq_offset / 8] &= ~std::uint64_t{1};
    ReadResult id = read_segment(copy.data(), bytes, 0);
    if (id.snapshot) out.torn_name = id.snapshot->process_name;
  }
  return out;
}

}  // namespace

std::optional<std::int64_t> pid_from_segment_name(const std::string& name_in) {
  std::string_view name = name_in;
  // "modelmem.alice.1234.r3f9c...": the name a publisher takes when the plain one was taken.
  if (std::size_t dot = name.rfind('.');
      dot != std::string_view::npos && dot + 2 < name.size() && name[dot + 1] == 'r' &&
      name.find_first_not_of("0123456789abcdef", dot + 2) == std::string_view::npos)
    name = name.substr(0, dot);
  std::size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 >= name.size()) return std::nullopt;
  std::int64_t pid = 0;
  const char* b = name.data() + dot + 1;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, pid);
  if (ec != std::errc() || p != e || pid <= 0) return std::nullopt;
  return pid;
}

std::optional<ProcessSnapshot> read_segment_file(const std::string& path, std::string& note,
                                                 unsigned max_wait_us) {
  std::size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    note = dir + ": cannot open: " + std::strerror(errno);
    return std::nullopt;
  }
  FileRead r = read_file(dir_fd, name, path, max_wait_us);
  close(dir_fd);
  note = r.note;
  return std::move(r.snapshot);
}

Scan scan(const ScanOptions& options) {
  Scan out;
  const std::string prefix = options.prefix.empty() ? segment_prefix() : options.prefix;
  int dir_fd = open(options.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    out.notes.push_back(options.directory + ": cannot open: " + std::strerror(errno));
    return out;
  }
  DIR* dir = fdopendir(dup(dir_fd));
  std::vector<std::string> names;
  if (dir != nullptr) {
    while (dirent* e = readdir(dir)) {
      std::string n = e->d_name;
      if (n.rfind(prefix, 0) == 0) names.push_back(n);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());

  for (const std::string& name : names) {
    std::optional<std::int64_t> name_pid = pid_from_segment_name(name);
    if (options.pid && name_pid != options.pid) continue;
    std::string shown = options.directory + "/" + name;
    if (!name_pid) {
      out.notes.push_back(shown + ": skipped: name does not end in a pid");
      continue;
    }
    FileRead r = read_file(dir_fd, name, shown, options.max_wait_us);
    if (!r.snapshot) {
      // A segment we cannot read is never trusted; but when it is ours (or we are root) and
      // its process (by the name's pid) is gone, nobody will ever finish writing it: torn,
      // garbage or truncated, it goes.
      bool gone = kill(static_cast<pid_t>(*name_pid), 0) != 0 && errno == ESRCH;
      if (gone && r.removable) {
        StaleSegment s{"/" + name, *name_pid, r.torn_name,
                       r.torn ? "process is gone (segment torn mid-write)"
                              : "process is gone (segment unreadable)"};
        if (options.clean_stale) s.removed = unlinkat(dir_fd, name.c_str(), 0) == 0;
        out.stale.push_back(std::move(s));
      } else {
        out.notes.push_back("skipped " + r.note);
      }
      continue;
    }
    ProcessSnapshot& p = *r.snapshot;
    if (p.pid != *name_pid) {
      out.notes.push_back("skipped " + shown + ": pid " + std::to_string(p.pid) +
                          " in the header does not match the name");
      continue;
    }
    Liveness l = liveness(p);
    if (l != Liveness::kAlive) {
      StaleSegment s{p.segment, p.pid, p.process_name,
                     l == Liveness::kGone ? "process is gone" : "pid now names another process"};
      if (options.clean_stale) {
        s.removed = unlinkat(dir_fd, name.c_str(), 0) == 0;
        if (!s.removed) {
          out.notes.push_back("cannot remove stale " + shown + ": " + std::strerror(errno));
        }
      }
      out.stale.push_back(std::move(s));
      continue;
    }
    out.processes.push_back(std::move(p));
  }
  close(dir_fd);
  std::sort(out.processes.begin(), out.processes.end(),
            [](const ProcessSnapshot& a, const ProcessSnapshot& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace modelmem::monitor
