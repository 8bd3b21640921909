// A monitor nobody can crash or switch off: a segment truncated while `info` reads it, a name
// taken in advance by another user (a file, a FIFO, a symbolic link), a full /dev/shm, a live
// segment truncated under its owner, segments of dead processes left with garbage in them, and
// root's view of every user's processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"
#include "modelmem/monitor/segment.hpp"

namespace modelmem::monitor {
namespace {

namespace fs = std::filesystem;

struct Folder {
  fs::path path;
  Folder() {
    char tmpl[] = "/tmp/modelmem-monitor-safety-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~Folder() { fs::remove_all(path); }
};

// A valid segment of `pools` pools for `pid` (several pages: a reader that mapped it would fault
// on the pages a truncation removed).
std::vector<unsigned char> segment_of(std::int64_t pid, std::uint64_t uid, std::size_t pools) {
  std::vector<unsigned char> bytes(segment_bytes(pools));
  SegmentWriter w(bytes.data(), pools, pid, uid, "proc", process_start_ticks(pid), 200);
  std::vector<PoolSnapshot> snaps(pools);
  for (std::size_t i = 0; i < pools; ++i) snaps[i].name = "pool" + std::to_string(i);
  w.write(snaps, wall_clock_ns());
  return bytes;
}

void put(const fs::path& p, const std::vector<unsigned char>& data) {
  int fd = open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  close(fd);
}

TEST(Safety, ASegmentTruncatedWhileItIsReadIsSkippedNotACrash) {
  Folder dir;
  const std::int64_t me = getpid();
  const auto good = segment_of(me, geteuid(), 64);
  ASSERT_GT(good.size(), 4u * 4096u);
  const fs::path file = dir.path / (std::string(kSegmentPrefix) + "tester." + std::to_string(me));
  put(file, good);
  std::atomic<bool> stop{false};
  std::thread vandal([&] {
    int fd = open(file.c_str(), O_RDWR);
    while (!stop.load()) {
      if (ftruncate(fd, 0) != 0) break;
      std::this_thread::yield();
      if (pwrite(fd, good.data(), good.size(), 0) != static_cast<ssize_t>(good.size())) break;
    }
    close(fd);
  });
  ScanOptions o;
  o.directory = dir.path;
  o.max_wait_us = 1000;
  o.clean_stale = false;
  int seen = 0, skipped = 0;
  for (int i = 0; i < 300; ++i) {
    Scan s = scan(o);  // a reader that mapped the file died of SIGBUS here
    seen += static_cast<int>(s.processes.size());
    skipped += static_cast<int>(s.notes.size());
    for (const ProcessSnapshot& p : s.processes) ASSERT_EQ(p.pools.size(), 64u);
  }
  stop = true;
  vandal.join();
  EXPECT_EQ(seen + skipped, 300);
  EXPECT_TRUE(fs::exists(file));  // a live process's segment is never removed
}

TEST(Safety, AGarbageSegmentOfADeadProcessIsRemoved) {
  Folder dir;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path file = dir.path / (std::string(kSegmentPrefix) + "tester." + std::to_string(dead));
  put(file, std::vector<unsigned char>(5000, 0xab));
  ScanOptions o;
  o.directory = dir.path;
  Scan s = scan(o);
  ASSERT_EQ(s.stale.size(), 1u);
  EXPECT_TRUE(s.stale[0].removed);
  EXPECT_FALSE(fs::exists(file));
}

TEST(Safety, PidIsReadFromANameWithARandomPart) {
  EXPECT_EQ(pid_from_segment_name("modelmem.alice.1234.r00ff00ff12345678"), 1234);
  EXPECT_EQ(pid_from_segment_name("modelmem.alice.1234"), 1234);
  EXPECT_EQ(pid_from_segment_name("modelmem.alice.1234.rxyz"), std::nullopt);
}

// Runs `body` in a child process as uid 65534 (needs root); returns its exit status.
template <typename Body>
int as_nobody(Body body) {
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

TEST(Safety, ANameTakenByAnotherUserDoesNotSwitchPublishingOff) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a file as another user";
  pid_t child = fork();
  if (child == 0) {
    // Another user takes this process's name before it publishes.
    const std::string name = "/dev/shm" + segment_name(geteuid(), getpid());
    int fd = open(name.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0 || fchown(fd, 65534, 65534) != 0) _exit(91);
    close(fd);
    auto a = std::make_shared<alloc::SystemAllocator>();
    auto reg = publish(a, {"taken", "host:0", "", 0});
    publish_now();
    const std::string seg = current_segment();
    if (!reg.active()) _exit(92);
    if (seg.find(".r") == std::string::npos) _exit(93);
    ScanOptions o;
    o.pid = getpid();
    Scan s = scan(o);
    const bool listed = s.processes.size() == 1 && s.processes[0].pools.size() == 1;
    shutdown();
    unlink(name.c_str());
    _exit(listed ? 0 : 94);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Safety, RootSeesEveryUsersProcessesButNoImpostor) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  Folder dir;
  chmod(dir.path.c_str(), 0777);
  // A process of uid 65534 that stays alive while root scans.
  int pipe_fds[2], ready[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_EQ(pipe(ready), 0);
  pid_t nobody = fork();
  if (nobody == 0) {
    close(pipe_fds[1]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
    if (write(ready[1], "x", 1) != 1) _exit(91);
    char c;
    while (read(pipe_fds[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(pipe_fds[0]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);  // it runs as uid 65534 now
  close(ready[0]);
  close(ready[1]);
  const std::string prefix = std::string(kSegmentPrefix) + "nobody.";
  const fs::path theirs = dir.path / (prefix + std::to_string(nobody));
  put(theirs, segment_of(nobody, 65534, 1));
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  // A segment of uid 65534's that names root's own process: not believed.
  const fs::path impostor = dir.path / (prefix + std::to_string(getpid()));
  put(impostor, segment_of(getpid(), 65534, 1));
  ASSERT_EQ(chown(impostor.c_str(), 65534, 65534), 0);
  ScanOptions o;
  o.directory = dir.path;
  o.clean_stale = false;
  Scan s = scan(o);
  // uid 65534 itself sees its own segments only (root's test segment is not readable to it).
  put(dir.path / (std::string(kSegmentPrefix) + "root." + std::to_string(getpid())),
      segment_of(getpid(), 0, 1));
  const int own_only = as_nobody([&] {
    ScanOptions mine;
    mine.directory = dir.path;
    mine.clean_stale = false;
    for (const ProcessSnapshot& p : scan(mine).processes)
      if (p.uid != 65534) return 1;
    return 0;
  });
  close(pipe_fds[1]);
  waitpid(nobody, nullptr, 0);
  EXPECT_EQ(own_only, 0);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, nobody);
  EXPECT_EQ(s.processes[0].uid, 65534u);
  bool noted = false;
  for (const auto& n : s.notes) noted |= n.find("does not own the process") != std::string::npos;
  EXPECT_TRUE(noted);
}

// How a child process ended, and what it wrote on stderr.
struct ChildEnd {
  pid_t pid = 0;
  int status = 0;
  bool hung = false;
  std::string err;
};

// Runs `body` in a forked child whose stderr goes to a file; kills it when it runs past
// `limit` (a test of a hang must end). The child exits with body()'s value.
template <typename Body>
ChildEnd run_in_child(Body body, std::chrono::seconds limit = std::chrono::seconds(20)) {
  Folder dir;
  const fs::path err = dir.path / "stderr";
  pid_t child = fork();
  if (child == 0) {
    int fd = open(err.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(95);
    close(fd);
    _exit(body());
  }
  ChildEnd end;
  end.pid = child;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (waitpid(child, &end.status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      end.hung = true;
      kill(child, SIGKILL);
      waitpid(child, &end.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  end.err = text.str();
  return end;
}

std::size_t lines_in(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Publishes one pool while `plant` stands at this process's segment name; 0 when publishing
// went on under another name, the planted file was left as it was, and `info` lists the pool.
template <typename Plant>
int publish_beside(Plant plant) {
  const std::string planted = "/dev/shm" + segment_name(geteuid(), getpid());
  if (!plant(planted)) return 80;
  struct stat before {};
  if (lstat(planted.c_str(), &before) != 0) return 81;
  auto a = std::make_shared<alloc::SystemAllocator>();
  auto reg = publish(a, {"planted", "host:0", "", 0});
  publish_now();
  const std::string seg = current_segment();
  int result = 0;
  struct stat after {};
  if (!reg.active()) {
    result = 82;
  } else if (seg.find(".r") == std::string::npos) {
    result = 83;
  } else if (lstat(planted.c_str(), &after) != 0 || after.st_ino != before.st_ino) {
    result = 84;  // the planted file is not ours to remove
  } else {
    ScanOptions o;
    o.pid = getpid();
    Scan s = scan(o);
    if (s.processes.size() != 1 || s.processes[0].pools.size() != 1) result = 85;
  }
  reg.reset();
  shutdown();
  unlink(planted.c_str());
  return result;
}

TEST(Safety, AFifoAtTheSegmentNameNeitherHangsNorSwitchesPublishingOff) {
  // shm_open(O_RDONLY) of a FIFO blocks until a writer comes: the program hung in publish().
  ChildEnd end = run_in_child([] {
    return publish_beside([](const std::string& path) { return mkfifo(path.c_str(), 0666) == 0; });
  });
  if (end.hung) unlink(("/dev/shm" + segment_name(geteuid(), end.pid)).c_str());
  ASSERT_FALSE(end.hung) << "publish() blocked on the FIFO";
  ASSERT_TRUE(WIFEXITED(end.status)) << end.err;
  EXPECT_EQ(WEXITSTATUS(end.status), 0) << end.err;
  EXPECT_EQ(lines_in(end.err), 1u) << end.err;
  EXPECT_NE(end.err.find("a FIFO, not a regular file"), std::string::npos) << end.err;
}

TEST(Safety, ASymbolicLinkAtTheSegmentNameIsNeitherFollowedNorASwitchOff) {
  Folder dir;
  const fs::path target = dir.path / "precious";
  {
    std::ofstream out(target);
    out << "keep me\n";
  }
  // A link to a file of the user's own (once followed, replaced), and a dangling one (once
  // followed, publishing went off).
  for (const fs::path& to : {target, dir.path / "nothing-here"}) {
    ChildEnd end = run_in_child([&] {
      return publish_beside(
          [&](const std::string& path) { return symlink(to.c_str(), path.c_str()) == 0; });
    });
    ASSERT_FALSE(end.hung);
    ASSERT_TRUE(WIFEXITED(end.status)) << end.err;
    EXPECT_EQ(WEXITSTATUS(end.status), 0) << to << ": " << end.err;
    EXPECT_EQ(lines_in(end.err), 1u) << end.err;
    EXPECT_NE(end.err.find("a symbolic link, not a regular file"), std::string::npos) << end.err;
  }
  std::ifstream in(target);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep me");
  EXPECT_EQ(fs::file_size(target), 8u);
}

// In a mount namespace of its own (root, or an unprivileged user namespace), /dev/shm replaced
// by a tmpfs of 64 KiB filled to the last byte. 77 when the system allows neither.
int on_a_full_dev_shm() {
  if (unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = geteuid();
    const gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
    auto put_text = [](const char* file, const std::string& text) {
      int fd = open(file, O_WRONLY);
      bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      if (fd >= 0) close(fd);
      return ok;
    };
    put_text("/proc/self/setgroups", "deny");
    if (!put_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") ||
        !put_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n"))
      return 77;
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("none", "/dev/shm", "tmpfs", 0, "size=64k") != 0)
    return 77;
  int fd = open("/dev/shm/filler", O_CREAT | O_WRONLY, 0600);
  if (fd < 0) return 70;
  std::vector<char> chunk(4096, 'x');
  while (write(fd, chunk.data(), chunk.size()) > 0) {
  }
  close(fd);
  return -1;
}

TEST(Safety, AFullDevShmTurnsPublishingOffAndTheProgramRunsOn) {
  ChildEnd end = run_in_child([] {
    if (int skip = on_a_full_dev_shm(); skip >= 0) return skip;
    auto a = std::make_shared<alloc::SystemAllocator>();
    auto reg = publish(a, {"full", "host:0", "", 0});  // a mapping of a sparse file: SIGBUS
    publish_now();
    if (reg.active() || !current_segment().empty()) return 1;
    void* p = a->allocate(1 << 20);  // the pool still serves the program
    a->deallocate(p);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      left.push_back(e.path().filename().string());
    return left == std::vector<std::string>{"filler"} ? 0 : 2;  // no half-made segment left
  });
  ASSERT_FALSE(end.hung);
  ASSERT_TRUE(WIFEXITED(end.status)) << "killed by signal " << WTERMSIG(end.status);
  if (WEXITSTATUS(end.status) == 77)
    GTEST_SKIP() << "no mount namespace here (needs root or unprivileged user namespaces)";
  EXPECT_EQ(WEXITSTATUS(end.status), 0) << end.err;
  EXPECT_EQ(lines_in(end.err), 1u) << end.err;
  EXPECT_NE(end.err.find("monitor publishing off: cannot allocate"), std::string::npos) << end.err;
  EXPECT_NE(end.err.find("No space left on device"), std::string::npos) << end.err;
}

TEST(Safety, ALiveSegmentTruncatedOrRemovedUnderItsOwnerKillsNobodyAndComesBack) {
  ChildEnd end = run_in_child([] {
    PublisherOptions opt;
    opt.interval = std::chrono::milliseconds(1);
    configure(opt);
    auto a = std::make_shared<alloc::SystemAllocator>();
    auto reg = publish(a, {"truncated", "host:0", "", 0});
    if (!reg.active()) return 1;
    const std::string file = "/dev/shm" + current_segment();
    std::atomic<bool> stop{false};
    std::thread vandal([&] {
      int fd = open(file.c_str(), O_RDWR);
      for (off_t size = 0; fd >= 0 && !stop.load(); size = (size + 1000) % 9000) {
        if (ftruncate(fd, size) != 0) break;
        std::this_thread::yield();
      }
      if (fd >= 0) close(fd);
    });
    ScanOptions o;
    o.pid = getpid();
    o.clean_stale = false;
    o.max_wait_us = 200;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < until) {
      publish_now();  // the owner writes (a mapping of the file died of SIGBUS here)
      scan(o);        // and reads
    }
    stop = true;
    vandal.join();
    publish_now();  // written whole again
    Scan s = scan(o);
    bool listed = s.processes.size() == 1 && s.processes[0].pools.size() == 1 &&
                  fs::file_size(file) == segment_bytes(options().capacity);
    // Removed under it (a reader in another pid namespace took it for a dead process's): made
    // again at the next update.
    unlink(file.c_str());
    publish_now();
    s = scan(o);
    listed = listed && s.processes.size() == 1 && s.processes[0].pools.size() == 1 &&
             current_segment() == s.processes[0].segment;
    reg.reset();
    shutdown();
    return listed ? 0 : 2;
  });
  ASSERT_FALSE(end.hung);
  ASSERT_TRUE(WIFEXITED(end.status)) << "killed by signal " << WTERMSIG(end.status);
  EXPECT_EQ(WEXITSTATUS(end.status), 0) << end.err;
  EXPECT_EQ(end.err, "");
}

// MODELMEM_MONITOR_NAMESPACE: a namespace's readers see its own processes only, the default
// readers none of them, and a bad name is refused with the variable named.
TEST(Safety, ANamespaceSeesOnlyItsOwnProcesses) {
  Folder dir;
  const std::int64_t me = getpid();
  put(dir.path / (std::string(kSegmentPrefix) + "tester." + std::to_string(me)),
      segment_of(me, geteuid(), 1));
  unsetenv("MODELMEM_MONITOR_NAMESPACE");
  EXPECT_EQ(segment_prefix(), "modelmem.");
  setenv("MODELMEM_MONITOR_NAMESPACE", "docs-1", 1);
  EXPECT_EQ(segment_prefix(), "modelmem_docs-1.");
  EXPECT_EQ(segment_name(geteuid(), 42).rfind("/modelmem_docs-1.", 0), 0u);
  ScanOptions o;
  o.directory = dir.path.string();
  o.clean_stale = false;
  EXPECT_TRUE(scan(o).processes.empty());  // the default namespace's process is not seen
  put(dir.path / ("modelmem_docs-1.tester." + std::to_string(me)), segment_of(me, geteuid(), 2));
  Scan in = scan(o);
  ASSERT_EQ(in.processes.size(), 1u);
  EXPECT_EQ(in.processes[0].pools.size(), 2u);
  unsetenv("MODELMEM_MONITOR_NAMESPACE");
  Scan out = scan(o);
  ASSERT_EQ(out.processes.size(), 1u);
  EXPECT_EQ(out.processes[0].pools.size(), 1u);  // the namespace's process is not seen
  for (const char* bad : {"a b", "x/y", "123456789012345678901234567890123"}) {
    setenv("MODELMEM_MONITOR_NAMESPACE", bad, 1);
    try {
      segment_prefix();
      ADD_FAILURE() << bad;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("MODELMEM_MONITOR_NAMESPACE="), std::string::npos)
          << e.what();
    }
  }
  unsetenv("MODELMEM_MONITOR_NAMESPACE");
}

}  // namespace
}  // namespace modelmem::monitor
