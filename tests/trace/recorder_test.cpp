#include "modelmem/trace/recorder.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

TEST(Recorder, KeepsEventsInOrderAndCountsOverflow) {
  Recorder recorder(4);
  EXPECT_EQ(recorder.capacity(), 4u);
  for (int i = 0; i < 6; ++i) recorder.on_event(make(EventKind::kAlloc, 0x1000 + i, 64, i));
  EXPECT_EQ(recorder.recorded(), 4u);
  EXPECT_EQ(recorder.dropped(), 2u);
  Trace t = from_recorder(recorder);
  ASSERT_EQ(t.events.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.events[i].address, 0x1000u + i);
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
  EXPECT_EQ(recorder.recorded(), 64u);
  EXPECT_EQ(recorder.dropped(), 40000u - 64u);
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
