// A monitor nobody can crash or switch off: a segment truncated while `info` reads it, a name
// taken in advance by another user, segments of dead processes left with garbage in them, and
// root's view of every user's processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/alloc/system_allocator.hpp"
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

}  // namespace
}  // namespace modelmem::monitor
