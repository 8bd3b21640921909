#include "modelmem/monitor/reader.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

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

struct Mapping {
  void* base = MAP_FAILED;
  std::size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

// What one file gave: a snapshot, or a note saying why not.
struct FileRead {
  std::optional<ProcessSnapshot> snapshot;
  bool torn = false;
  std::string note;
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
  if (st.st_uid != geteuid()) {
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
  Mapping m;
  m.base = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  m.bytes = bytes;
  close(fd);
  if (m.base == MAP_FAILED) {
    out.note = shown + ": cannot map: " + std::strerror(errno);
    return out;
  }
  ReadResult r = read_segment(m.base, bytes, max_wait_us);
  if (r.snapshot) {
    r.snapshot->segment = "/" + name;
    out.snapshot = std::move(r.snapshot);
    return out;
  }
  out.torn = r.torn;
  out.note = shown + ": " + r.problem;
  return out;
}

}  // namespace

std::optional<std::int64_t> pid_from_segment_name(const std::string& name) {
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
      if (n.rfind(kSegmentPrefix, 0) == 0) names.push_back(n);
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
      // A segment we cannot read is never trusted; but when it is ours and its process (by the
      // name's pid) is gone, nobody will ever finish writing it.
      bool gone = kill(static_cast<pid_t>(*name_pid), 0) != 0 && errno == ESRCH;
      if (r.torn && gone) {
        StaleSegment s{"/" + name, *name_pid, "", "process is gone (segment torn mid-write)"};
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
