#include "modelmem/trace/analysis.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "modelmem/trace/replay.hpp"
#include "synthetic.hpp"

namespace modelmem::trace {
namespace {

using testing::add_step;
using testing::TraceBuilder;

const Advice* find_advice(const Analysis& a, const std::string& topic) {
  for (const Advice& adv : a.advice)
    if (adv.topic == topic) return &adv;
  return nullptr;
}

// A key of the advice's config string starts with `prefix`.
bool has_key(const Advice& adv, const std::string& prefix) {
  std::size_t start = 0;
  while (start <= adv.config.size()) {
    std::size_t comma = adv.config.find(',', start);
    if (comma == std::string::npos) comma = adv.config.size();
    if (adv.config.compare(start, prefix.size(), prefix) == 0) return true;
    start = comma + 1;
  }
  return false;
}

// Peak of one step of add_step at scale 1: input 3 MiB + workspace + 1 MiB output.
constexpr std::size_t kStepPeak = (3u << 20) + (64u << 10) + (1u << 20);

TEST(Analyze, PeriodicTraceWithoutMarksGetsTheStaticArena) {
  TraceBuilder b("periodic");
  std::uintptr_t weights = b.alloc(10 << 20);  // live across every step
  std::uintptr_t warmup = b.alloc(5 << 20);    // warm-up that differs from the steps
  b.free(warmup, 5 << 20);
  for (int s = 0; s < 5; ++s) add_step(b, 1, false);
  b.free(weights, 10 << 20);
  Analysis a = analyze(b.trace());
  EXPECT_FALSE(a.steps_from_marks);
  ASSERT_TRUE(a.period.found);
  EXPECT_EQ(a.period.length, 4u * 6u + 2u);  // 6 layers x (2 allocs + 2 frees) + first alloc/free
  EXPECT_GE(a.period.match, 0.99);           // the final free of the weights differs
  EXPECT_EQ(a.peak_live, 15u << 20);         // weights + warm-up
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_GE(a.groups[0].steps.size(), 4u);
  EXPECT_EQ(a.groups[0].live_in, 10u << 20);
  EXPECT_GE(a.groups[0].planned, a.groups[0].lower_bound);
  const Advice* arena = find_advice(a, "static-arena");
  ASSERT_NE(arena, nullptr);
  EXPECT_NE(arena->message.find("repeats every 26 events"), std::string::npos) << arena->message;
  EXPECT_NE(arena->message.find("strategy:planned"), std::string::npos) << arena->message;
  EXPECT_EQ(arena->config, "strategy:planned,planned_steps:auto");
  ASSERT_TRUE(arena->check.has_value());
  EXPECT_EQ(arena->check->ooms, 0u);
  EXPECT_EQ(find_advice(a, "buckets"), nullptr);
  EXPECT_NE(find_advice(a, "static-pool"), nullptr);
}

TEST(Analyze, MarkedStepsAreUsed) {
  TraceBuilder b("marked");
  for (int s = 0; s < 3; ++s) add_step(b, 1, true);
  Analysis a = analyze(b.trace());
  EXPECT_TRUE(a.steps_from_marks);
  ASSERT_EQ(a.steps.size(), 3u);
  EXPECT_EQ(a.steps[0].peak_live, kStepPeak);
  EXPECT_EQ(a.groups.size(), 1u);
  ASSERT_NE(find_advice(a, "static-arena"), nullptr);
  EXPECT_NE(find_advice(a, "static-arena")->message.find("3 of 3 marked steps"), std::string::npos);
}

TEST(Analyze, VaryingDimensionGetsBuckets) {
  TraceBuilder b("varying");
  for (std::size_t scale : {1, 4, 2, 1, 4, 8}) add_step(b, scale, true);
  Analysis a = analyze(b.trace());
  ASSERT_EQ(a.groups.size(), 4u);
  std::vector<double> scales;
  for (const StepGroup& g : a.groups) scales.push_back(g.scale);
  std::sort(scales.begin(), scales.end());
  EXPECT_EQ(scales, (std::vector<double>{1, 2, 4, 8}));
  const Advice* buckets = find_advice(a, "buckets");
  ASSERT_NE(buckets, nullptr);
  EXPECT_NE(buckets->message.find("boundaries (relative to the smallest step): 1,2,4,8"),
            std::string::npos)
      << buckets->message;
  EXPECT_EQ(find_advice(a, "static-arena"), nullptr);
  // One plan per kind of step: the planned arena keeps 4 by default.
  EXPECT_EQ(buckets->config, "strategy:planned,planned_steps:marked");
  EXPECT_EQ(a.peak_live, 8 * ((3u << 20) + (1u << 20)) + (64u << 10));
}

TEST(Analyze, FragmentedTraceNamesTheCauseAndKeys) {
  // A caching allocator's view: 2 MiB segments, blocks carved from them; most blocks die but
  // one at each end of every segment survives, so no segment can be returned.
  TraceBuilder b("fragmented");
  const std::size_t seg = 2u << 20;
  const std::size_t blk = 256u << 10;
  std::vector<std::uintptr_t> survivors;
  for (int s = 0; s < 8; ++s) {
    std::uintptr_t base = 0x40000000 + static_cast<std::uintptr_t>(s) * 2 * seg;
    b.segment(base, seg);
    for (std::size_t k = 0; k < seg / blk; ++k) b.alloc_at(base + k * blk, blk);
    for (std::size_t k = 1; k + 1 < seg / blk; ++k) b.free(base + k * blk, blk);
    survivors.push_back(base);
    survivors.push_back(base + seg - blk);
  }
  for (std::uintptr_t p : survivors) b.free(p, blk);
  Analysis a = analyze(b.trace());
  ASSERT_TRUE(a.peak_reserved.has_value());
  EXPECT_EQ(*a.peak_reserved, 8 * seg);
  ASSERT_TRUE(a.reserved.has_value());
  const Advice* reserved = find_advice(a, "reserved");
  ASSERT_NE(reserved, nullptr);
  // At peak reserved (the 8th segment's creation) seven segments hold two blocks each.
  EXPECT_EQ(a.reserved->fragmented, 7 * (seg - 2 * blk));
  EXPECT_NE(reserved->message.find("Causes, largest first: fragmentation"), std::string::npos)
      << reserved->message;
  EXPECT_TRUE(has_key(*reserved, "strategy:caching"));
  ASSERT_TRUE(reserved->check.has_value());
  EXPECT_EQ(reserved->check->ooms, 0u);
  EXPECT_TRUE(has_key(*reserved, "expandable_segments:True"));
  EXPECT_NE(reserved->message.find("max_split_size_mb:21"), std::string::npos);
  // The numbers add up: reserved = live + unused, and the causes split the unused bytes.
  const ReservedBreakdown& r = *a.reserved;
  EXPECT_EQ(r.reserved, 8 * seg);
  EXPECT_EQ(r.reserved, r.live + r.unused);
  EXPECT_EQ(r.unused, r.in_empty_ranges + r.oversize + r.fragmented);
  EXPECT_EQ(r.live, 14 * blk);
  EXPECT_EQ(r.live_total, 14 * blk);
}

TEST(Analyze, DeadCachedSegmentsAreNamed) {
  TraceBuilder b("dead-shapes");
  // Shape A fills a segment then goes away for good; shape B needs new segments.
  b.segment(0x50000000, 8u << 20);
  b.alloc_at(0x50000000, 7u << 20);
  b.free(0x50000000, 7u << 20);
  b.segment(0x60000000, 2u << 20);
  b.alloc_at(0x60000000, 1u << 20);
  b.free(0x60000000, 1u << 20);
  Analysis a = analyze(b.trace());
  ASSERT_TRUE(a.reserved.has_value());
  EXPECT_EQ(a.reserved->dead_cached, 8u << 20);
  const Advice* reserved = find_advice(a, "reserved");
  ASSERT_NE(reserved, nullptr);
  EXPECT_NE(reserved->message.find("caching of dead shapes"), std::string::npos);
  EXPECT_TRUE(has_key(*reserved, "garbage_collection_threshold:"));
}

TEST(Analyze, BadInputIsReportedAndAnalysisContinues) {
  TraceBuilder b("bad");
  b.free(0xdead, 64);  // allocated before recording
  std::uintptr_t p = b.alloc(1 << 20);
  b.alloc_at(p, 2 << 20);  // the free in between was lost
  b.free(p);
  b.trace().dropped = 17;
  Analysis a = analyze(b.trace());
  EXPECT_EQ(a.peak_live, 2u << 20);
  auto joined = [&] {
    std::string s;
    for (const auto& w : a.skipped) s += w + "\n";
    return s;
  }();
  EXPECT_NE(joined.find("skipped 1 free(s)"), std::string::npos) << joined;
  EXPECT_NE(joined.find("still live"), std::string::npos) << joined;
  ASSERT_NE(find_advice(a, "trace"), nullptr);
  EXPECT_NE(find_advice(a, "trace")->message.find("dropped 17"), std::string::npos);
}

TEST(Analyze, EmptyTrace) {
  Trace t;
  t.name = "empty";
  Analysis a = analyze(t);
  EXPECT_EQ(a.events, 0u);
  ASSERT_EQ(a.advice.size(), 1u);
  EXPECT_EQ(a.advice[0].topic, "trace");
  EXPECT_NO_THROW(to_text(a));
  EXPECT_NO_THROW(to_json(a).dump());
}

TEST(Analyze, JsonHasSummaryAndAdvice) {
  TraceBuilder b("json");
  for (int s = 0; s < 3; ++s) add_step(b, 1, true);
  nlohmann::json j = to_json(analyze(b.trace()));
  EXPECT_EQ(j["summary"]["peak_live"].get<std::size_t>(), kStepPeak);
  EXPECT_EQ(j["steps"]["list"].size(), 3u);
  EXPECT_TRUE(j["period"]["found"].get<bool>());
  EXPECT_FALSE(j["advice"].empty());
  EXPECT_TRUE(j["reserved_at_peak"].is_null());
  std::string text = to_text(analyze(b.trace()));
  EXPECT_NE(text.find("diagnosis:"), std::string::npos);
}

TEST(Analyze, TimesCountFromTheFirstEvent) {
  TraceBuilder b("late");
  b.mark("step_begin");                 // t = 1000 ns
  std::uintptr_t p = b.alloc(1 << 20);  // t = 2000 ns: the peak
  b.free(p);
  for (auto& e : b.trace().events) e.time_ns += 998'000'000'000ull;  // a clock counting from boot
  Analysis a = analyze(b.trace());
  EXPECT_EQ(a.start_time_ns, 998'000'001'000ull);
  EXPECT_EQ(a.peak_live_time_ns, 1'000u);
  EXPECT_NEAR(a.duration_s, 2e-6, 1e-12);
  EXPECT_NE(to_text(a).find("(0.000 s from the first event)"), std::string::npos) << to_text(a);
}

TEST(Analyze, EveryAdvisedStringReplaysWithoutOom) {
  TraceBuilder periodic("periodic");
  for (int s = 0; s < 4; ++s) add_step(periodic, 1, false);
  TraceBuilder varying("varying");
  for (std::size_t scale : {1, 4, 2, 1, 4, 8, 16, 3}) add_step(varying, scale, true);
  for (Trace* t : {&periodic.trace(), &varying.trace()}) {
    SCOPED_TRACE(t->name);
    Analysis a = analyze(*t);
    std::size_t with_config = 0;
    for (const Advice& adv : a.advice) {
      if (adv.config.empty()) continue;
      ++with_config;
      SCOPED_TRACE(adv.config);
      ASSERT_TRUE(adv.check.has_value());
      EXPECT_EQ(adv.check->ooms, 0u);
      ReplayOptions options;
      options.touch = false;
      ReplayResult r = replay(*t, *allocator_from_config(adv.config), options);
      EXPECT_EQ(r.ooms, 0u);
      EXPECT_EQ(r.peak_reserved, adv.check->peak_reserved);
    }
    EXPECT_GE(with_config, 2u);  // the planned arena (or buckets) and the static pool
  }
  // Six kinds of step (x1, 2, 3, 4, 8, 16): more than the 4 plans kept by default.
  const Analysis varying_analysis = analyze(varying.trace());
  const Advice* buckets = find_advice(varying_analysis, "buckets");
  ASSERT_NE(buckets, nullptr);
  EXPECT_EQ(buckets->config, "strategy:planned,planned_steps:marked,planned_max_plans:6");
}

TEST(Analyze, TheStaticPoolIsTheSmallestThatReplaysPlusTheMargin) {
  TraceBuilder b("pool");
  for (int s = 0; s < 3; ++s) add_step(b, 1, true);
  Analysis a = analyze(b.trace());
  const Advice* pool = find_advice(a, "static-pool");
  ASSERT_NE(pool, nullptr);
  StaticPoolSize size = advised_static_pool(b.trace());
  EXPECT_EQ(a.static_pool_bytes, size.advised_bytes);
  EXPECT_EQ(pool->config,
            "strategy:static,static_pool_mb:" + std::to_string(size.advised_bytes >> 20));
  const std::size_t need_mib = size.need_bytes >> 20;
  EXPECT_EQ(size.advised_bytes >> 20, (need_mib * 11 + 9) / 10);  // +10%, rounded up
  ReplayOptions options;
  options.touch = false;
  auto at = [&](std::size_t mib) {
    return replay(b.trace(),
                  *allocator_from_config("strategy:static,static_pool_mb:" + std::to_string(mib)),
                  options)
        .ooms;
  };
  EXPECT_EQ(at(need_mib), 0u);
  EXPECT_GT(at(need_mib - 1), 0u);  // one MiB less does not hold the step
}

TEST(Analyze, ATraceNoReplayCanHoldGetsNoConfigString) {
  // 2^50 bytes live: no host memory replays it; analyze still reports, and advises no string.
  TraceBuilder b("huge");
  for (int s = 0; s < 3; ++s) {
    b.mark("step_begin");
    std::uintptr_t p = b.alloc(std::size_t{1} << 50);
    b.free(p);
    b.mark("step_end");
  }
  Analysis a = analyze(b.trace());
  EXPECT_EQ(a.peak_live, std::size_t{1} << 50);
  ASSERT_NE(find_advice(a, "static-pool"), nullptr);
  for (const Advice& adv : a.advice) {
    SCOPED_TRACE(adv.message);
    EXPECT_TRUE(adv.config.empty());
  }
  EXPECT_NO_THROW(to_text(a));
}

TEST(Analyze, BestFitPoolSimulation) {
  TraceBuilder b("pool");
  std::uintptr_t x = b.alloc(1000);  // 1024 aligned
  std::uintptr_t y = b.alloc(256);
  b.free(x);
  std::uintptr_t z = b.alloc(512);   // fits in x's hole
  std::uintptr_t w = b.alloc(2048);  // does not: grows the pool
  b.free(y);
  b.free(z);
  b.free(w);
  Blocks blocks = match_blocks(b.trace());
  EXPECT_EQ(simulate_best_fit_pool(b.trace(), blocks), 1024u + 256u + 2048u);
}

TEST(Analyze, SharedResnetTrace) {
  auto path = std::filesystem::path(MODELMEM_SHARED_DATA) / "traces" / "torch_resnet50.events.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data missing";
  Analysis a = analyze(read_trace(path));
  EXPECT_EQ(a.peak_live, 11763840u);  // the README's peak for one step
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].lower_bound, 11763840u);
  EXPECT_NE(find_advice(a, "static-arena"), nullptr);
}

// One stream per block, every block live before any is freed: the caching pool's replay asks for
// its statistics at every new peak, and its largest free block was a walk of every free block
// (one per stream), so 200,000 streams ran for minutes. Sixteen times the streams must cost
// about sixteen times as much (the walk made it over a hundred times).
TEST(Analyze, TimeGrowsLinearlyWithTheNumberOfStreams) {
  auto seconds_for = [](std::size_t streams) {
    TraceBuilder b("streams");
    std::vector<std::uintptr_t> addresses;
    for (std::size_t i = 0; i < streams; ++i) {
      addresses.push_back(b.alloc(512 * (1 + i % 7)));
      b.trace().events.back().stream = static_cast<alloc::Stream>(i);
    }
    for (std::size_t i = 0; i < streams; ++i) {
      b.free(addresses[i]);
      b.trace().events.back().stream = static_cast<alloc::Stream>(i);
    }
    const auto start = std::chrono::steady_clock::now();
    Analysis a = analyze(b.trace());
    EXPECT_GT(a.peak_live, 0u);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double small = std::max(seconds_for(5000), 1e-3);
  const double large = seconds_for(80000);
  EXPECT_LT(large / small, 60.0) << small << " s for 5,000 streams, " << large << " s for 80,000";
}

}  // namespace
}  // namespace modelmem::trace
