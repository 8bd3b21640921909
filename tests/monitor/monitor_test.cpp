#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"
#include "modelmem/monitor/segment.hpp"
#include "modelmem/monitor/system.hpp"
#include "support/command.hpp"

extern char** environ;

namespace modelmem::monitor {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
// ---- helpers ----

struct Child {
  pid_t pid = -1;
  int stdin_fd = -1;
  std::string segment;
};

std::string read_line(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

Child start_child(bool churn = false) {
  int in[2], out[2];
  EXPECT_EQ(pipe(in), 0);
  EXPECT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "MODELMEM_MONITOR", 16) != 0) env_store.emplace_back(*e);
  }
  env_store.emplace_back("MODELMEM_MONITOR_INTERVAL_MS=50");
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string path = MODELMEM_MONITOR_CHILD;
  std::string flag = "--churn";
  std::vector<char*> argv{path.data()};
  if (churn) argv.push_back(flag.data());
  argv.push_back(nullptr);
  Child c;
  EXPECT_EQ(posix_spawn(&c.pid, path.c_str(), &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  c.stdin_fd = in[1];
  std::string line = read_line(out[0]);
  close(out[0]);
  char seg[256] = {};
  int pid = 0;
  EXPECT_EQ(std::sscanf(line.c_str(), "ready %d %255s", &pid, seg), 2) << "child said: " << line;
  EXPECT_EQ(pid, c.pid);
  c.segment = seg;
  return c;
}

int stop_child(Child& c) {
  close(c.stdin_fd);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return status;
}

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  modelmem::testing::CommandResult c =
      modelmem::testing::run_command(std::string(MODELMEM_CLI) + " " + args + " 2>/dev/null");
  return {c.code, std::move(c.out)};
}

const json* find_pool(const json& process, const std::string& name) {
  for (const json& p : process["pools"]) {
    if (p["pool"] == name) return &p;
  }
  return nullptr;
}

std::string shm_path(const std::string& segment) {
  return "/dev/shm" + segment;
}

// A private directory standing in for /dev/shm, for hand-made (broken) segments.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/modelmem-monitor-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<unsigned char> good_segment(std::int64_t pid, std::size_t pools = 2) {
  std::vector<unsigned char> bytes(segment_bytes(4));
  SegmentWriter w(bytes.data(), 4, pid, geteuid(), "proc", process_start_ticks(pid), 200);
  std::vector<PoolSnapshot> snaps(pools);
  for (std::size_t i = 0; i < pools; ++i) {
    snaps[i].name = "pool" + std::to_string(i);
    snaps[i].reserved = (i + 1) * kMiB;
  }
  w.write(snaps, wall_clock_ns());
  return bytes;
}

void write_file(const fs::path& p, const void* data, std::size_t n, mode_t mode = 0600) {
  int fd = open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, mode);
  ASSERT_GE(fd, 0);
  fchmod(fd, mode);
  ASSERT_EQ(write(fd, data, n), static_cast<ssize_t>(n));
  close(fd);
}

bool has_note(const Scan& s, const std::string& name, const std::string& what) {
  for (const auto& n : s.notes) {
    if (n.find(name) != std::string::npos && n.find(what) != std::string::npos) return true;
  }
  return false;
}

// ---- the segment layout ----

TEST(Segment, RoundTripKeepsEveryField) {
  std::vector<unsigned char> bytes(segment_bytes(3));
  SegmentWriter w(bytes.data(), 3, 4242, 1000, "python3", 77, 200, "python3 serve.py --port 1");
  PoolSnapshot p;
  p.name = "resnet50";
  p.device = "cuda:0";
  p.strategy = "expandable";
  p.budget = 4 * kMiB;
  p.reserved = 10;
  p.allocated = 9;
  p.peak_allocated = 8;
  p.peak_reserved = 7;
  p.requested = 6;
  p.largest_free_block = 5;
  p.fragmentation = 0.25;
  p.oom_count = 4;
  p.alloc_retries = 3;
  p.warning_count = 2;
  // The NPU fallback warning, whole (the monitor once cut it at 127 bytes).
  const std::string warning =
      "modelmem: expandable_segments is not supported on npu:0 (aclrtReserveMemAddress returned "
      "207000 (feature not supported): the driver and firmware may not match the CANN toolkit; "
      "install the ones released with it); falling back to the caching pool with fixed-size "
      "segments";
  p.warning = warning;
  p.alloc_count = 11;
  p.alloc_bytes_total = 12;
  p.free_bytes_total = 13;
  p.segments = 14;
  p.plan_hits = 16;
  p.plan_misses = 17;
  p.update_time_ns = 15;
  w.write({p}, 99);
  ReadResult r = read_segment(bytes.data(), bytes.size());
  ASSERT_TRUE(r.snapshot) << r.problem;
  const ProcessSnapshot& s = *r.snapshot;
  EXPECT_EQ(s.pid, 4242);
  EXPECT_EQ(s.uid, 1000u);
  EXPECT_EQ(s.process_name, "python3");
  EXPECT_EQ(s.command, "python3 serve.py --port 1");
  EXPECT_EQ(s.proc_start_ticks, 77u);
  EXPECT_EQ(s.interval_ms, 200u);
  EXPECT_EQ(s.update_time_ns, 99u);
  EXPECT_EQ(s.update_count, 1u);
  ASSERT_EQ(s.pools.size(), 1u);
  const PoolSnapshot& q = s.pools[0];
  EXPECT_EQ(q.name, "resnet50");
  EXPECT_EQ(q.device, "cuda:0");
  EXPECT_EQ(q.strategy, "expandable");
  EXPECT_EQ(q.budget, 4 * kMiB);
  EXPECT_EQ(q.reserved, 10u);
  EXPECT_EQ(q.allocated, 9u);
  EXPECT_EQ(q.peak_allocated, 8u);
  EXPECT_EQ(q.peak_reserved, 7u);
  EXPECT_EQ(q.requested, 6u);
  EXPECT_EQ(q.largest_free_block, 5u);
  EXPECT_DOUBLE_EQ(q.fragmentation, 0.25);
  EXPECT_EQ(q.oom_count, 4u);
  EXPECT_EQ(q.alloc_retries, 3u);
  EXPECT_EQ(q.warning_count, 2u);
  EXPECT_EQ(q.warning, warning);
  EXPECT_EQ(q.alloc_count, 11u);
  EXPECT_EQ(q.plan_hits, 16u);
  EXPECT_EQ(q.plan_misses, 17u);
  EXPECT_EQ(q.alloc_bytes_total, 12u);
  EXPECT_EQ(q.free_bytes_total, 13u);
  EXPECT_EQ(q.segments, 14u);
  EXPECT_EQ(q.update_time_ns, 15u);
}

TEST(Segment, LongAndHostileStringsAreCutAndCleaned) {
  std::vector<unsigned char> bytes(segment_bytes(1));
  SegmentWriter w(bytes.data(), 1, 1, 1, std::string(200, 'p'), 0, 200);
  PoolSnapshot p;
  p.name = std::string("evil\x1b[2Jname") + std::string(100, 'x');
  w.write({p}, 1);
  ReadResult r = read_segment(bytes.data(), bytes.size());
  ASSERT_TRUE(r.snapshot);
  EXPECT_EQ(r.snapshot->process_name, std::string(kProcessNameBytes - 1, 'p'));
  const std::string& name = r.snapshot->pools[0].name;
  EXPECT_EQ(name.size(), kPoolNameBytes - 1);
  EXPECT_EQ(name.substr(0, 12), "evil?[2Jname");
}

TEST(Segment, MorePoolsThanCapacityAreCounted) {
  std::vector<unsigned char> bytes(segment_bytes(2));
  SegmentWriter w(bytes.data(), 2, 1, 1, "p", 0, 200);
  w.write(std::vector<PoolSnapshot>(5), 1);
  ReadResult r = read_segment(bytes.data(), bytes.size());
  ASSERT_TRUE(r.snapshot);
  EXPECT_EQ(r.snapshot->pools.size(), 2u);
  EXPECT_EQ(r.snapshot->pools_dropped, 3u);
}

TEST(Segment, BadHeadersAreRejectedWithAReason) {
  auto good = good_segment(getpid());
  auto expect_problem = [](std::vector<unsigned char> b, std::size_t n, const std::string& what) {
    ReadResult r = read_segment(b.data(), n, 1000);
    EXPECT_FALSE(r.snapshot);
    EXPECT_NE(r.problem.find(what), std::string::npos) << r.problem;
  };
  auto bad = good;
  bad[0] ^= 0xff;
  expect_problem(bad, bad.size(), "bad magic");
  bad = good;
  bad[8] = 99;  // version word
  expect_problem(bad, bad.size(), "unsupported version");
  bad = good;
  bad[24] = 8;  // record size word
  expect_problem(bad, bad.size(), "bad layout");
  expect_problem(good, good.size() - 8, "truncated");
  expect_problem(good, 16, "truncated");
  std::vector<unsigned char> zero(good.size());
  expect_problem(zero, zero.size(), "no magic");
  bad = good;
  bad[32] = 0xff;  // capacity word: 255 records do not fit
  bad[33] = 0xff;
  expect_problem(bad, bad.size(), "bad capacity");
}

TEST(Segment, AWriteThatNeverFinishesIsReportedTorn) {
  auto bytes = good_segment(getpid());
  auto* seq = reinterpret_cast<std::atomic<std::uint64_t>*>(bytes.data()) + 10;
  seq->fetch_add(1);  // odd: a writer started and never finished
  ReadResult r = read_segment(bytes.data(), bytes.size(), 2000);
  EXPECT_FALSE(r.snapshot);
  EXPECT_TRUE(r.torn);
  EXPECT_NE(r.problem.find("torn"), std::string::npos);
}

// The sequence lock: a reader racing a writer sees only whole records (every field of a record
// written in one update carries the same value). Also run under ThreadSanitizer.
TEST(Segment, ReaderRacingWriterNeverSeesATornRecord) {
  constexpr std::size_t kPools = 8;
  std::vector<std::uint64_t> storage(segment_bytes(kPools) / 8);
  void* base = storage.data();
  SegmentWriter w(base, kPools, 1, 1, "race", 0, 1);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<PoolSnapshot> pools(kPools);
    for (std::uint64_t k = 1; !stop.load(std::memory_order_relaxed); ++k) {
      for (auto& p : pools) {
        p.name = "pool-" + std::to_string(k);
        p.reserved = p.allocated = p.peak_allocated = p.largest_free_block = k;
        p.oom_count = p.alloc_count = k;
        p.fragmentation = static_cast<double>(k);
      }
      w.write(pools, k);
      // A short pause: back to back, the writer can starve a reader whose copy is slower (a
      // sanitizer build on a loaded machine: one consistent read in 300 ms). Writes still
      // land while the reader copies.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop = true;
      t.join();
    }
  } joiner{stop, writer};
  std::uint64_t reads = 0, last = 0;
  // 300 ms of racing, longer (up to 5 s) until there were enough consistent reads.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto now = std::chrono::steady_clock::now(); now < until || (reads <= 10 && now < hard);
       now = std::chrono::steady_clock::now()) {
    ReadResult r = read_segment(base, storage.size() * 8, 1000000);
    ASSERT_TRUE(r.snapshot) << r.problem;
    const ProcessSnapshot& s = *r.snapshot;
    if (s.update_count == 0) continue;
    std::uint64_t k = s.update_time_ns;
    ASSERT_GE(k, last);
    last = k;
    ASSERT_EQ(s.pools.size(), kPools);
    for (const auto& p : s.pools) {
      ASSERT_EQ(p.reserved, k);
      ASSERT_EQ(p.allocated, k);
      ASSERT_EQ(p.peak_allocated, k);
      ASSERT_EQ(p.largest_free_block, k);
      ASSERT_EQ(p.oom_count, k);
      ASSERT_EQ(p.alloc_count, k);
      ASSERT_EQ(p.fragmentation, static_cast<double>(k));
      ASSERT_EQ(p.name, "pool-" + std::to_string(k));
    }
    ++reads;
  }
  EXPECT_GT(reads, 10u);
  EXPECT_GT(last, 1u);
}

// ---- reading a directory of segments ----

TEST(Scan, SkipsBrokenSegmentsWithANote) {
  TempDir dir;
  std::int64_t me = getpid();
  auto good = good_segment(me);
  std::string base = std::string(kSegmentPrefix) + "tester.";
  write_file(dir.path / (base + std::to_string(me)), good.data(), good.size());

  auto bad = good;
  bad[0] ^= 1;
  write_file(dir.path / (base + "magic." + std::to_string(me)), bad.data(), bad.size());
  write_file(dir.path / (base + "short." + std::to_string(me)), good.data(), 100);
  write_file(dir.path / (base + "cut." + std::to_string(me)), good.data(), good.size() - 64);
  write_file(dir.path / (base + "open." + std::to_string(me)), good.data(), good.size(), 0644);
  write_file(dir.path / (base + "nopid"), good.data(), good.size());
  auto torn = good;
  reinterpret_cast<std::atomic<std::uint64_t>*>(torn.data())[10].fetch_add(1);
  write_file(dir.path / (base + "torn." + std::to_string(me)), torn.data(), torn.size());
  auto other_pid = good_segment(1);  // header says pid 1, name says us
  write_file(dir.path / (base + "liar." + std::to_string(me)), other_pid.data(), other_pid.size());
  ASSERT_EQ(mkfifo((dir.path / (base + "fifo." + std::to_string(me))).c_str(), 0600), 0);

  ScanOptions o;
  o.directory = dir.path;
  o.max_wait_us = 2000;
  Scan s = scan(o);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, me);
  EXPECT_EQ(s.processes[0].pools.size(), 2u);
  EXPECT_TRUE(s.stale.empty());
  EXPECT_TRUE(has_note(s, "magic.", "bad magic"));
  EXPECT_TRUE(has_note(s, "short.", "truncated"));
  EXPECT_TRUE(has_note(s, "cut.", "truncated"));
  EXPECT_TRUE(has_note(s, "open.", "readable or writable by others"));
  EXPECT_TRUE(has_note(s, "nopid", "does not end in a pid"));
  EXPECT_TRUE(has_note(s, "torn.", "torn"));
  EXPECT_TRUE(has_note(s, "liar.", "does not match"));
  EXPECT_TRUE(has_note(s, "fifo.", "not a regular file"));
  EXPECT_EQ(s.notes.size(), 8u);
  // Broken segments of a live process are never removed.
  EXPECT_TRUE(fs::exists(dir.path / (base + "magic." + std::to_string(me))));
}

TEST(Scan, RemovesSegmentsOfDeadProcesses) {
  TempDir dir;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  auto seg = good_segment(dead);
  std::string name = std::string(kSegmentPrefix) + "tester." + std::to_string(dead);
  write_file(dir.path / name, seg.data(), seg.size());
  auto torn = seg;
  reinterpret_cast<std::atomic<std::uint64_t>*>(torn.data())[10].fetch_add(1);
  std::string torn_name = std::string(kSegmentPrefix) + "torn." + std::to_string(dead);
  write_file(dir.path / torn_name, torn.data(), torn.size());

  ScanOptions o;
  o.directory = dir.path;
  o.max_wait_us = 2000;
  o.clean_stale = false;
  Scan s = scan(o);
  EXPECT_TRUE(s.processes.empty());
  ASSERT_EQ(s.stale.size(), 2u);
  EXPECT_FALSE(s.stale[0].removed);
  EXPECT_TRUE(fs::exists(dir.path / name));

  o.clean_stale = true;
  s = scan(o);
  ASSERT_EQ(s.stale.size(), 2u);
  for (const auto& st : s.stale) {
    EXPECT_EQ(st.pid, dead);
    EXPECT_TRUE(st.removed);
    EXPECT_NE(st.why.find("gone"), std::string::npos);
    // A writer killed mid-update leaves it torn; the name it was made with still shows.
    EXPECT_EQ(st.process_name, "proc") << st.segment;
  }
  EXPECT_FALSE(fs::exists(dir.path / name));
  EXPECT_FALSE(fs::exists(dir.path / torn_name));
}

TEST(Scan, ARecycledPidIsStale) {
  TempDir dir;
  std::int64_t me = getpid();
  std::vector<unsigned char> bytes(segment_bytes(1));
  // Our pid, but a start time that is not ours: an earlier process that had our pid.
  SegmentWriter w(bytes.data(), 1, me, geteuid(), "old", process_start_ticks(me) + 1, 200);
  w.write({}, 1);
  std::string name = std::string(kSegmentPrefix) + "tester." + std::to_string(me);
  write_file(dir.path / name, bytes.data(), bytes.size());
  ScanOptions o;
  o.directory = dir.path;
  Scan s = scan(o);
  EXPECT_TRUE(s.processes.empty());
  ASSERT_EQ(s.stale.size(), 1u);
  EXPECT_NE(s.stale[0].why.find("another process"), std::string::npos);
  EXPECT_TRUE(s.stale[0].removed);
}

TEST(System, ParsesMeminfo) {
  TempDir dir;
  std::string text =
      "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
      "MemAvailable:    8000000 kB\nCached:          2000000 kB\nShmem:  10 kB\nBogus: x\n";
  write_file(dir.path / "meminfo", text.data(), text.size());
  auto m = read_host_memory(dir.path / "meminfo");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->total, 16000000ull * 1024);
  EXPECT_EQ(m->available, 8000000ull * 1024);
  EXPECT_EQ(m->free, 1000000ull * 1024);
  EXPECT_EQ(m->cached, 2000000ull * 1024);
  EXPECT_EQ(m->shmem, 10ull * 1024);
  EXPECT_FALSE(read_host_memory(dir.path / "missing"));
  auto real = read_host_memory();
  ASSERT_TRUE(real);
  EXPECT_GT(real->total, 0u);
}

// ---- the publisher, in this process ----

class FixedAllocator : public alloc::Allocator {
 public:
  explicit FixedAllocator(std::int64_t reserved) { stats_.reserved_bytes.all.add(reserved); }
  void* do_allocate(std::size_t, alloc::Stream) override { return nullptr; }
  void do_deallocate(void*) override {}
  alloc::Stats do_stats() const override { return stats_; }
  void do_reset_peak() override {}
  std::string do_describe() const override { return "fixed(test)"; }
  alloc::LiveBlock do_block(const void*) const override { return {}; }
  alloc::Stats stats_;
};

TEST(Publisher, PublishesUpdatesAndRemovesPools) {
  auto a = std::make_shared<FixedAllocator>(5 * kMiB);
  auto b = std::make_shared<FixedAllocator>(7 * kMiB);
  auto ra = publish(a, {"a", "host:0", "", 0});
  auto rb = publish(b, {"b", "host:0", "static", 9 * kMiB});
  ASSERT_TRUE(ra.active());
  std::string seg = current_segment();
  ASSERT_FALSE(seg.empty());
  struct stat st {};
  ASSERT_EQ(stat(shm_path(seg).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());

  publish_now();
  ScanOptions o;
  o.pid = getpid();
  Scan s = scan(o);
  ASSERT_EQ(s.processes.size(), 1u);
  ASSERT_EQ(s.processes[0].pools.size(), 2u);
  EXPECT_EQ(s.processes[0].pools[0].name, "a");
  EXPECT_EQ(s.processes[0].pools[0].strategy, "fixed");
  EXPECT_EQ(s.processes[0].pools[0].reserved, 5 * kMiB);
  EXPECT_EQ(s.processes[0].pools[1].budget, 9 * kMiB);

  rb.reset();  // unpublished explicitly
  a.reset();   // expired: dropped at the next update
  publish_now();
  s = scan(o);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_TRUE(s.processes[0].pools.empty());

  shutdown();
  EXPECT_TRUE(current_segment().empty());
  EXPECT_FALSE(fs::exists(shm_path(seg)));
}

TEST(Publisher, BackgroundThreadCopiesWithinTheInterval) {
  PublisherOptions opt;
  opt.interval = std::chrono::milliseconds(20);
  configure(opt);
  auto a = std::make_shared<FixedAllocator>(kMiB);
  auto ra = publish(a, {"bg", "host:0", "", 0});
  ASSERT_TRUE(ra.active());
  ScanOptions o;
  o.pid = getpid();
  // The first copy happens on registration; later ones every interval. Wait for update 3.
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Scan s = scan(o);
    seen = s.processes.size() == 1 && s.processes[0].update_count >= 3 &&
           s.processes[0].pools.size() == 1 && s.processes[0].interval_ms == 20;
  }
  EXPECT_TRUE(seen);
  ra.reset();
  shutdown();
  configure(PublisherOptions{});
}

TEST(Publisher, DisabledPublishesNothing) {
  PublisherOptions opt;
  opt.enabled = false;
  configure(opt);
  auto a = std::make_shared<FixedAllocator>(kMiB);
  auto ra = publish(a, {"off", "host:0", "", 0});
  EXPECT_FALSE(ra.active());
  EXPECT_TRUE(current_segment().empty());
  configure(PublisherOptions{});
}

#if defined(__SANITIZE_THREAD__)
#define MODELMEM_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MODELMEM_UNDER_TSAN 1
#endif
#endif

TEST(Publisher, AForkedChildDoesNotTouchTheParentsSegment) {
#ifdef MODELMEM_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in a child forked from a threaded parent";
#endif
  auto a = std::make_shared<FixedAllocator>(kMiB);
  auto ra = publish(a, {"parent", "host:0", "", 0});
  std::string seg = current_segment();
  ASSERT_FALSE(seg.empty());
  pid_t child = fork();
  if (child == 0) {
    // The child has no segment until it publishes its own, and exiting removes only its own.
    bool ok = current_segment().empty();
    auto b = std::make_shared<FixedAllocator>(kMiB);
    auto rb = publish(b, {"child", "host:0", "", 0});
    ok = ok && rb.active() && current_segment() != seg;
    std::exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(fs::exists(shm_path(seg)));
  std::string child_seg = segment_name(geteuid(), child);
  EXPECT_FALSE(fs::exists(shm_path(child_seg)));
  ra.reset();
  shutdown();
}

// ---- a child process, seen through the real `modelmem info` ----

TEST(Info, SeesBothPoolsOfAChildWithTheRightNumbers) {
  Child c = start_child();
  struct stat st {};
  ASSERT_EQ(stat(shm_path(c.segment).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  CliRun r = run_cli("info --json -p " + std::to_string(c.pid));
  ASSERT_EQ(r.status, 0) << r.out;
  json j = json::parse(r.out);
  ASSERT_EQ(j["processes"].size(), 1u);
  const json& p = j["processes"][0];
  EXPECT_EQ(p["pid"], c.pid);
  EXPECT_EQ(p["process"], "monitor_child");
  EXPECT_EQ(p["segment"], c.segment);
  ASSERT_EQ(p["pools"].size(), 2u);

  const json* resnet = find_pool(p, "resnet");
  ASSERT_NE(resnet, nullptr);
  EXPECT_EQ((*resnet)["device"], "host:0");
  EXPECT_EQ((*resnet)["strategy"], "counting");
  EXPECT_EQ((*resnet)["budget"], 64 * kMiB);
  EXPECT_EQ((*resnet)["reserved"], 64 * kMiB);
  EXPECT_EQ((*resnet)["allocated"], 3 * kMiB + kMiB / 2);
  EXPECT_EQ((*resnet)["peak_allocated"], 3 * kMiB + kMiB / 2);
  EXPECT_EQ((*resnet)["largest_free_block"], 60 * kMiB + kMiB / 2);
  EXPECT_EQ((*resnet)["fragmentation"], 0.0);
  EXPECT_EQ((*resnet)["oom_count"], 0);
  EXPECT_EQ((*resnet)["fallback_warnings"], 0);
  EXPECT_EQ((*resnet)["allocations_total"], 4);

  const json* bert = find_pool(p, "bert");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ((*bert)["strategy"], "caching");
  EXPECT_EQ((*bert)["budget"], 0);
  EXPECT_EQ((*bert)["reserved"], 32 * kMiB);
  EXPECT_EQ((*bert)["allocated"], 4 * kMiB);
  EXPECT_EQ((*bert)["peak_allocated"], 8 * kMiB);
  EXPECT_EQ((*bert)["largest_free_block"], 28 * kMiB);
  EXPECT_EQ((*bert)["oom_count"], 1);
  EXPECT_EQ((*bert)["fallback_warnings"], 1);
  EXPECT_NE((*bert)["warning"].get<std::string>().find("no virtual memory"), std::string::npos);

  // The table and Prometheus views carry the same numbers.
  CliRun t = run_cli("info -p " + std::to_string(c.pid));
  EXPECT_EQ(t.status, 0);
  EXPECT_NE(t.out.find("resnet"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("64.0M"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("no virtual memory"), std::string::npos) << t.out;
  CliRun prom = run_cli("info --format prometheus -p " + std::to_string(c.pid));
  EXPECT_EQ(prom.status, 0);
  std::string line = "modelmem_pool_reserved_bytes{pid=\"" + std::to_string(c.pid) +
                     "\",process=\"monitor_child\",pool=\"bert\",device=\"host:0\","
                     "strategy=\"caching\"} " +
                     std::to_string(32 * kMiB) + "\n";
  EXPECT_NE(prom.out.find(line), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("# TYPE modelmem_pool_ooms_total counter"), std::string::npos);

  // Normal exit removes the segment.
  int status = stop_child(c);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(shm_path(c.segment)));
  CliRun gone = run_cli("info --json -p " + std::to_string(c.pid));
  EXPECT_EQ(gone.status, 1);
  // The pid asked for is named, and whether it runs at all.
  modelmem::testing::CommandResult none =
      modelmem::testing::run_command(std::string(MODELMEM_CLI) + " info -p 999999 2>&1 >/dev/null");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("pid 999999 publishes no modelmem pools (no such process)"),
            std::string::npos)
      << none.out;
}

TEST(Info, ReportsAndCleansTheSegmentOfAKilledChild) {
  Child c = start_child();
  ASSERT_TRUE(fs::exists(shm_path(c.segment)));
  kill(c.pid, SIGKILL);
  int status = 0;
  waitpid(c.pid, &status, 0);
  close(c.stdin_fd);
  EXPECT_TRUE(fs::exists(shm_path(c.segment)));  // nobody removed it

  CliRun r = run_cli("info --json -p " + std::to_string(c.pid));
  json j = json::parse(r.out);
  EXPECT_TRUE(j["processes"].empty());
  ASSERT_EQ(j["stale"].size(), 1u);
  EXPECT_EQ(j["stale"][0]["pid"], c.pid);
  EXPECT_EQ(j["stale"][0]["process"], "monitor_child");
  EXPECT_EQ(j["stale"][0]["removed"], true);
  EXPECT_FALSE(fs::exists(shm_path(c.segment)));
}

TEST(Info, RejectsBadArguments) {
  EXPECT_EQ(run_cli("info --format yaml").status, 2);
  EXPECT_EQ(run_cli("info --json --format prometheus").status, 2);
  EXPECT_EQ(run_cli("info -p -3").status, 2);
}

// ---- `modelmem top`, driven in tmux like a user would ----

std::string sh(const std::string& cmd) {
  return modelmem::testing::run_command(cmd).out;
}

TEST(Top, ShowsTheChildsPoolsIn80x24AndQuitsOnQ) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux is not installed";
  Child c = start_child(/*churn=*/true);
  // A private tmux server, so the test never touches a user's sessions.
  std::string tmux = "tmux -L modelmem-test-" + std::to_string(getpid());
  std::string cmd =
      tmux + " new-session -d -s top -x 80 -y 24 '" + MODELMEM_CLI + " top -d 0.2 -s rate'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string screen;
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    screen = sh(tmux + " capture-pane -p -t top");
    seen = screen.find("resnet") != std::string::npos && screen.find("bert") != std::string::npos &&
           screen.find(std::to_string(c.pid)) != std::string::npos;
  }
  EXPECT_TRUE(seen) << screen;
  // Every line fits 80 columns; the header and the sort field are shown; rates are counted
  // for the churning pool (sorted first by rate).
  std::size_t lines = 0, start = 0;
  while (start < screen.size()) {
    std::size_t end = screen.find('\n', start);
    if (end == std::string::npos) end = screen.size();
    EXPECT_LE(end - start, 80u) << screen.substr(start, end - start);
    start = end + 1;
    ++lines;
  }
  EXPECT_LE(lines, 24u);
  EXPECT_NE(screen.find("sort:rate"), std::string::npos) << screen;
  EXPECT_NE(screen.find("ALLOC/S"), std::string::npos) << screen;
  EXPECT_LT(screen.find("resnet"), screen.find("bert")) << screen;

  std::system((tmux + " send-keys -t top q").c_str());
  bool ended = false;
  for (int i = 0; i < 60 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ended = std::system((tmux + " has-session -t top 2>/dev/null").c_str()) != 0;
  }
  EXPECT_TRUE(ended) << "top did not quit on q";
  if (!ended) std::system((tmux + " kill-server").c_str());
  stop_child(c);
}

TEST(Top, BatchModePrintsFramesAndRejectsBadFields) {
  Child c = start_child();
  CliRun r = run_cli("top -n 2 -d 0.1 -s peak");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("sort:peak"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bert"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "escapes written to a pipe";
  EXPECT_EQ(run_cli("top -s nonsense -n 1").status, 2);
  EXPECT_EQ(run_cli("top -d 0 -n 1").status, 2);
  stop_child(c);
}

}  // namespace
}  // namespace modelmem::monitor
