#include "modelmem/trace/recorder.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/core/files.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {
namespace {

using alloc::Event;
using alloc::EventKind;

Event make(EventKind kind, std::uintptr_t address, std::size_t size, std::uint64_t time = 1) {
  return Event{kind, time, address, size, 0, 0, 0, nullptr};
}

std::string temp_path(const char* stem) {
  return (std::filesystem::temp_directory_path() /
          (std::string(stem) + "." + std::to_string(::getpid()) + ".csv"))
      .string();
}

TEST(Recorder, KeepsTheLatestEventsAndCountsOverflow) {
  Recorder recorder(4);
  EXPECT_EQ(recorder.capacity(), 4u);
  for (int i = 0; i < 6; ++i) recorder.on_event(make(EventKind::kAlloc, 0x1000 + i, 64, i));
  EXPECT_EQ(recorder.recorded(), 6u);
  EXPECT_EQ(recorder.dropped(), 2u);
  Trace t = from_recorder(recorder);
  ASSERT_EQ(t.events.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.events[i].address, 0x1002u + i);
  EXPECT_EQ(t.dropped, 2u);
  ASSERT_FALSE(t.warnings.empty());
  EXPECT_NE(t.warnings[0].find("dropped 2"), std::string::npos);
  // Draining made room again.
  recorder.on_event(make(EventKind::kFree, 0x1000, 64));
  EXPECT_EQ(recorder.pending(), 1u);
}

TEST(Recorder, CapacityRoundsUpToPowerOfTwo) {
  EXPECT_EQ(Recorder(5).capacity(), 8u);
  EXPECT_EQ(Recorder(0).capacity(), 2u);
}

TEST(Recorder, ConcurrentThreadsLoseNothingBelowCapacity) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  Recorder recorder(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&recorder, t] {
      for (int i = 0; i < kPerThread; ++i)
        recorder.on_event(make(EventKind::kAlloc, (std::uintptr_t(t) << 32) | i, 8));
    });
  // Drain while they record: nothing may be lost or seen twice.
  std::set<std::uintptr_t> seen;
  auto sink = [](const Event& e, void* ctx) {
    static_cast<std::set<std::uintptr_t>*>(ctx)->insert(e.address);
  };
  while (seen.size() < std::size_t(kThreads) * kPerThread / 2) recorder.drain(sink, &seen);
  for (auto& th : threads) th.join();
  recorder.drain(sink, &seen);
  EXPECT_EQ(seen.size(), std::size_t(kThreads) * kPerThread);
  EXPECT_EQ(recorder.dropped(), 0u);
}

TEST(Recorder, OverflowNeverBlocksUnderContention) {
  Recorder recorder(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&recorder] {
      for (int i = 0; i < 10000; ++i) recorder.on_event(make(EventKind::kAlloc, 1, 8));
    });
  for (auto& th : threads) th.join();
  // Every event was either kept (the latest 64 at most) or counted as dropped.
  EXPECT_LE(recorder.pending(), 64u);
  EXPECT_EQ(recorder.dropped() + recorder.pending(), 40000u);
}

// Lines of a file, and whether it ends with a newline.
std::vector<std::string> lines_of(const std::string& path, bool* whole = nullptr) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (whole != nullptr) *whole = !text.empty() && text.back() == '\n';
  std::vector<std::string> out;
  std::string line;
  std::istringstream lines(text);
  while (std::getline(lines, line)) out.push_back(line);
  return out;
}

TEST(Recorder, StreamsToTheFileAChunkAtATime) {
  const std::string path = temp_path("modelmem_stream");
  int fd = core::open_output_file(path.c_str(), 0600, nullptr);
  ASSERT_GE(fd, 0);
  Recorder recorder(1024);
  ASSERT_TRUE(recorder.stream_to(fd, 64));
  for (int i = 0; i < 10000; ++i) recorder.on_event(make(EventKind::kAlloc, 0x1000 + i, 64, i));
  // Before any flush, at most one chunk is missing from the file: what a SIGKILL can lose.
  EXPECT_GE(lines_of(path).size(), 1u + 10000u - 64u);
  EXPECT_LT(recorder.pending(), 64u);
  ASSERT_TRUE(recorder.flush());
  ::close(fd);
  Trace t = read_trace(path);
  ASSERT_EQ(t.events.size(), 10000u);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(t.events[i].address, 0x1000u + i);
  EXPECT_EQ(t.dropped, 0u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // addresses are nobody else's business
  std::filesystem::remove(path);
}

// A flush (in a signal or exit handler) while other threads go on recording writes what was
// recorded before it and returns. It used to write until the ring was empty, which threads
// recording faster than it writes kept from happening (a SIGINT'd program then hung in its
// handler). Made certain here: the file is a small pipe whose reader records 1000 events for
// every 4 KiB it reads, so each write the flush makes brings more events than it wrote.
TEST(Recorder, AFlushEndsWhileOtherThreadsKeepRecording) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
  Recorder recorder(1 << 14);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bytes{0};
  std::thread reader([&] {
    char buffer[4096];
    for (std::uintptr_t i = 0;;) {
      ssize_t n = ::read(fds[0], buffer, sizeof buffer);
      if (n <= 0) break;
      bytes += static_cast<std::uint64_t>(n);
      for (int k = 0; k < 1000 && !stop.load(); ++k, ++i)
        recorder.on_event(make(EventKind::kAlloc, 0x1000 + i, 64, i));
    }
  });
  ASSERT_TRUE(recorder.stream_to(fds[1], 1 << 13));  // the flush does the writing
  for (int i = 0; i < 500; ++i) recorder.on_event(make(EventKind::kFree, 0x1000 + i, 0, i));
  auto flushed = std::async(std::launch::async, [&] { return recorder.flush(); });
  const bool ended = flushed.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  stop = true;  // lets an unbounded flush end too, so the test fails rather than hangs
  EXPECT_TRUE(ended) << "the flush did not end while a thread recorded";
  EXPECT_TRUE(flushed.get());
  EXPECT_TRUE(recorder.flush());
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_GT(recorder.recorded(), 1500u);  // the reader did record while the flush wrote
}

TEST(Recorder, AFailedWriteLeavesAFileEndingAtAWholeEvent) {
  // A file size limit stands for a full disk (EFBIG instead of ENOSPC), in a child process.
  const std::string path = temp_path("modelmem_full");
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {
      100000, 100000
    };
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int fd = core::open_output_file(path.c_str(), 0600, nullptr);
    Recorder recorder(1 << 12);
    if (fd < 0 || !recorder.stream_to(fd, 256)) ::_exit(3);
    for (int i = 0; i < 20000; ++i) recorder.on_event(make(EventKind::kAlloc, 0x1000 + i, 64, i));
    const bool flushed = recorder.flush();
    ::_exit(!flushed && recorder.stream_error() == EFBIG ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  bool whole = false;
  std::vector<std::string> lines = lines_of(path, &whole);
  EXPECT_TRUE(whole);
  EXPECT_GT(lines.size(), 1000u);
  EXPECT_LE(std::filesystem::file_size(path), 100000u);
  Trace t = read_trace(path);  // no truncated line
  EXPECT_EQ(t.events.size(), lines.size() - 1);
  std::filesystem::remove(path);
}

TEST(Recorder, ATraceFileIsNeverWrittenThroughASymlink) {
  const std::string target = temp_path("modelmem_target");
  const std::string link = temp_path("modelmem_link");
  { std::ofstream(target) << "precious\n"; }
  std::filesystem::create_symlink(target, link);
  Recorder recorder(16);
  recorder.on_event(make(EventKind::kAlloc, 1, 1));
  errno = 0;
  EXPECT_FALSE(recorder.write_csv(link.c_str()));
  EXPECT_EQ(errno, ELOOP);
  EXPECT_EQ(lines_of(target), std::vector<std::string>{"precious"});
  // A dangling link creates nothing where it points.
  std::filesystem::remove(target);
  EXPECT_FALSE(recorder.write_csv(link.c_str()));
  EXPECT_FALSE(std::filesystem::exists(target));
  const char* why = nullptr;
  EXPECT_LT(core::open_output_file(link.c_str(), 0600, &why), 0);
  EXPECT_NE(std::string(why).find("symbolic link"), std::string::npos);
  std::filesystem::remove(link);
}

TEST(Recorder, WritesCsvThatReadsBack) {
  Recorder recorder(16);
  Event alloc_event{EventKind::kAlloc, 100, 0xdead00, 4096, 7, 1, 3, nullptr};
  recorder.on_event(alloc_event);
  recorder.mark("step,begin\n");  // separators in a label must not break the line
  recorder.on_event(make(EventKind::kFree, 0xdead00, 4096, alloc::now_ns()));
  std::string path = temp_path("modelmem_recorder");
  ASSERT_TRUE(recorder.write_csv(path.c_str()));
  Trace t = read_trace(path);
  std::filesystem::remove(path);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].kind, EventKind::kAlloc);
  EXPECT_EQ(t.events[0].address, 0xdead00u);
  EXPECT_EQ(t.events[0].size, 4096u);
  EXPECT_EQ(t.events[0].stream, 7u);
  EXPECT_EQ(t.events[0].pool, 1u);
  EXPECT_EQ(t.events[0].thread, 3u);
  EXPECT_EQ(t.events[1].kind, EventKind::kMark);
  EXPECT_EQ(t.events[1].label, "step_begin_");
  EXPECT_EQ(t.events[2].kind, EventKind::kFree);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(Recorder, WriteFailureIsReported) {
  Recorder recorder(4);
  recorder.on_event(make(EventKind::kAlloc, 1, 1));
  EXPECT_FALSE(recorder.write_csv("/nonexistent-dir/x.csv"));
  EXPECT_FALSE(recorder.write_csv(-1));
}

TEST(Recorder, FormatsEveryKind) {
  char line[256];
  for (int k = 0; k <= static_cast<int>(EventKind::kMark); ++k) {
    auto kind = static_cast<EventKind>(k);
    ASSERT_GT(format_csv_line(make(kind, 0x10, 5), line, sizeof line), 0u);
    std::string s(line);
    EXPECT_EQ(s.substr(0, s.find(',')), event_name(kind));
    EXPECT_EQ(parse_event_name(event_name(kind)), kind);
  }
  EXPECT_FALSE(parse_event_name("malloc").has_value());
  EXPECT_EQ(format_csv_line(make(EventKind::kAlloc, 1, 1), line, 8), 0u);
}

}  // namespace
}  // namespace modelmem::trace
