#include "modelmem/trace/replay.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"
#include "synthetic.hpp"

namespace modelmem::trace {
namespace {

using testing::add_step;
using testing::TraceBuilder;

// A heap allocator with a hard limit, so a test can see OOMs and steps.
class LimitedHeap : public alloc::Allocator {
 public:
  explicit LimitedHeap(std::size_t limit) : limit_(limit) {}
  ~LimitedHeap() override {
    for (auto& [p, size] : live_) std::free(p);
  }
  void* do_allocate(std::size_t size, alloc::Stream) override {
    if (used_ + size > limit_)
      throw OutOfMemory(OomInfo{size, limit_ - used_, limit_, used_, 0, {}, "test"});
    void* p = std::malloc(size);
    live_[p] = size;
    used_ += size;
    stats_.allocated_bytes.all.add(static_cast<std::int64_t>(size));
    stats_.reserved_bytes.all.add(static_cast<std::int64_t>(size));
    return p;
  }
  void do_deallocate(void* p) override {
    auto it = live_.find(p);
    if (it == live_.end()) throw InvalidInput("not mine");
    used_ -= it->second;
    stats_.allocated_bytes.all.sub(static_cast<std::int64_t>(it->second));
    stats_.reserved_bytes.all.sub(static_cast<std::int64_t>(it->second));
    std::free(p);
    live_.erase(it);
  }
  alloc::Stats do_stats() const override { return stats_; }
  void do_reset_peak() override {}
  std::string do_describe() const override { return "limited heap"; }
  alloc::LiveBlock do_block(const void* p) const override {
    auto it = live_.find(const_cast<void*>(p));
    return it == live_.end() ? alloc::LiveBlock{} : alloc::LiveBlock{it->second, 0, 0};
  }
  void do_begin_step() override { ++steps_; }
  std::size_t steps_ = 0;

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  alloc::Stats stats_;
};

TEST(Replay, PeakLiveEqualsTheTracesOwn) {
  TraceBuilder b("steps");
  auto weights = b.alloc(10 << 20);
  for (std::size_t scale : {1, 2, 1, 4}) add_step(b, scale, true);
  b.free(weights, 10 << 20);
  b.free(0x1234, 64);  // unknown: skipped
  Analysis a = analyze(b.trace());
  LimitedHeap heap(1ull << 40);
  ReplayResult r = replay(b.trace(), heap);
  EXPECT_EQ(r.peak_live, a.peak_live);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_EQ(r.allocs, a.allocs);
  EXPECT_EQ(r.frees, a.frees - 1);
  EXPECT_EQ(r.skipped_frees, 1u);
  EXPECT_EQ(heap.steps_, 4u);
  EXPECT_GT(r.mean_ns, 0.0);
  // The 99th percentile of positive times is positive, and at least the typical time.
  EXPECT_GT(r.p99_ns, 0.0);
  EXPECT_GE(r.p99_ns, r.mean_ns / 100);
  ASSERT_EQ(r.notes.size(), 1u);
}

TEST(Replay, OomsAreCountedAndTheirFreesSkipped) {
  TraceBuilder b("oom");
  auto x = b.alloc(1 << 20);
  auto y = b.alloc(1 << 20);  // over the limit
  b.free(y);
  b.free(x);
  LimitedHeap heap(1536 << 10);
  ReplayResult r = replay(b.trace(), heap);
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(r.allocs, 1u);
  EXPECT_EQ(r.peak_live, 1u << 20);
  EXPECT_FALSE(r.notes.empty());
}

TEST(Replay, EveryStrategyMatchesTheTracesPeakLive) {
  auto path =
      std::filesystem::path(MODELMEM_SHARED_DATA) / "traces" / "torch_bert_varlen.events.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data missing";
  Trace t = read_trace(path);
  Analysis a = analyze(t);
  StrategyContext context{t, a.best_fit_pool + a.best_fit_pool / 10, a.marks > 0};
  ASSERT_FALSE(replay_strategies().empty());
  for (const ReplayStrategy& s : replay_strategies()) {
    SCOPED_TRACE(s.name);
    auto allocator = s.make(context);
    ReplayOptions options;
    options.touch = false;
    ReplayResult r = replay(t, *allocator, options);
    EXPECT_EQ(r.peak_live, a.peak_live);
    EXPECT_EQ(r.ooms, 0u);
    EXPECT_GE(r.peak_reserved, r.peak_live);
    EXPECT_GE(r.fragmentation_at_peak, 0.0);
    EXPECT_LE(r.fragmentation_at_peak, 1.0);
    EXPECT_EQ(r.allocs, a.allocs);
  }
}

TEST(Replay, RepeatReplaysTheWholeTrace) {
  TraceBuilder b("repeat");
  b.alloc(4096);  // never freed: freed between replays
  auto x = b.alloc(8192);
  b.free(x);
  LimitedHeap heap(1 << 20);
  ReplayOptions options;
  options.repeat = 3;
  ReplayResult r = replay(b.trace(), heap, options);
  EXPECT_EQ(r.allocs, 6u);
  EXPECT_EQ(r.peak_live, 4096u + 8192u);
  EXPECT_EQ(heap.stats().allocated_bytes.all.current, 0);
}

}  // namespace
}  // namespace modelmem::trace

namespace modelmem::trace {
namespace {

TEST(RunReplay, TheRequestIsCheckedBeforeTheTraceIsRead) {
  ReplayRequest request;
  request.trace = "/nonexistent/trace.csv";
  request.strategy = "nope";
  try {
    run_replay(request);
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("unknown strategy 'nope'"), std::string::npos);
  }
  request.strategy = "config";
  EXPECT_THROW(run_replay(request), InvalidInput);  // needs a config string
  request.config = "strategy:static";               // without a size
  EXPECT_THROW(run_replay(request), InvalidInput);
  request.config = "strategy:caching";
  EXPECT_THROW(run_replay(request), InvalidInput);  // now the missing file
}

// A replay of a bundled trace (examples/traces/NAME.events.csv), pages not touched.
ReplayRequest bundled(const std::string& name, const std::string& strategy,
                      const std::string& config) {
  ReplayRequest request;
  request.trace =
      (std::filesystem::path(MODELMEM_SOURCE_DIR) / "examples" / "traces" / (name + ".events.csv"))
          .string();
  request.strategy = strategy;
  request.config = config;
  request.options.touch = false;
  return request;
}

TEST(RunReplay, AStrategyAndAConfigStringAreBothReplayed) {
  const auto path = std::filesystem::path(MODELMEM_SOURCE_DIR) / "examples" / "traces" /
                    "torch_resnet50.events.csv";
  ReplayReport report = run_replay(bundled("torch_resnet50", "static", "strategy:caching"));
  ASSERT_EQ(report.results.size(), 2u);
  EXPECT_EQ(report.results[0].strategy, "static");
  EXPECT_EQ(report.results[1].strategy, "config");
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.peak_live, 11763840u);
  // The static pool is analyze's advice, replayed with no OOM.
  EXPECT_EQ(report.static_pool_bytes, analyze(read_trace(path)).static_pool_bytes);
  EXPECT_EQ(report.results[0].ooms, 0u);
  EXPECT_EQ(report.results[0].peak_reserved, report.static_pool_bytes);
  const std::string text = to_text(report);
  EXPECT_NE(text.find("note: --strategy static and --config: both replayed"), std::string::npos);
  EXPECT_EQ(to_json(report).size(), 2u);
}

// A replay's figures do not depend on the machine's load: the planned arena's plans are searched
// for a fixed amount of work (planned_defer:False, set for replays), not for a time. With a
// 50 ms limit, the search on the clock gave 27.88 MiB here with the spinners and 27.50 MiB idle
// (and analyze's replay, at 500 ms, 27.62 MiB at load 24).
TEST(RunReplay, APlannedReplayIsTheSameOnABusyMachine) {
  const ReplayRequest request = bundled(
      "torch_bert_varlen", "config", "strategy:planned,planned_steps:marked,planned_solve_ms:50");
  const ReplayReport idle = run_replay(request);
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (unsigned t = 0; t < 4 * std::max(1u, std::thread::hardware_concurrency()); ++t)
    spinners.emplace_back([&stop] {
      volatile std::uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  std::vector<ReplayReport> busy;
  for (int i = 0; i < 3; ++i) busy.push_back(run_replay(request));
  stop = true;
  for (auto& t : spinners) t.join();
  ASSERT_EQ(idle.results.size(), 1u);
  for (const ReplayReport& b : busy) {
    ASSERT_EQ(b.results.size(), 1u);
    EXPECT_EQ(b.results[0].peak_reserved, idle.results[0].peak_reserved);
    EXPECT_EQ(b.results[0].ooms, 0u);
  }
}

}  // namespace
}  // namespace modelmem::trace
