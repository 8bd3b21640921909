#include <gtest/gtest.h>

#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::config {
using namespace modelmem::alloc;
namespace {

std::string planned_error_of(const std::string& text) {
  try {
    build(parse_config(text));
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(PlannedConfig, BuildsAPlannedArenaOverACachingPool) {
  Built b = build(parse_config(
      "strategy:planned,planned_steps:marked,planned_warmup_steps:0,planned_solver:best-fit,"
      "planned_max_plans:2,planned_mismatch_limit:3,planned_min_kb:4,planned_fallback:caching"));
  auto* planned = dynamic_cast<PlannedAllocator*>(b.allocator.get());
  ASSERT_NE(planned, nullptr);
  EXPECT_FALSE(planned->options().auto_steps);
  EXPECT_EQ(planned->options().warmup_steps, 0u);
  EXPECT_EQ(planned->options().max_plans, 2u);
  EXPECT_EQ(planned->options().mismatch_limit, 3u);
  EXPECT_EQ(planned->options().min_size, 4096u);
  EXPECT_EQ(planned->options().solver, "best-fit");
  EXPECT_NE(b.allocator->describe().find("fallback=caching"), std::string::npos);
  for (int step = 0; step < 3; ++step) {
    b.allocator->begin_step();
    void* p = b.allocator->allocate(1 << 20);
    void* q = b.allocator->allocate(100);  // below planned_min_kb: the caching pool
    b.allocator->deallocate(p);
    b.allocator->deallocate(q);
    b.allocator->end_step();
  }
  EXPECT_EQ(planned->planned_stats().hits, 2u);
}

TEST(PlannedConfig, DefaultsAreAutomaticSteps) {
  Built b = build(parse_config("strategy:planned"));
  auto* planned = dynamic_cast<PlannedAllocator*>(b.allocator.get());
  ASSERT_NE(planned, nullptr);
  EXPECT_TRUE(planned->options().auto_steps);
  EXPECT_TRUE(planned->options().huge_pages);
  EXPECT_EQ(planned->options().solver, "best");
  // The fallback reuses memory (a caching pool): never worse than no modelmem at all.
  EXPECT_NE(b.allocator->describe().find("fallback=caching"), std::string::npos);
}

TEST(PlannedConfig, BadValuesAndCombinationsNameTheKey) {
  EXPECT_NE(planned_error_of("strategy:planned,planned_solver:magic").find("planned_solver"),
            std::string::npos);
  EXPECT_NE(planned_error_of("strategy:planned,planned_steps:sometimes").find("planned_steps"),
            std::string::npos);
  EXPECT_NE(planned_error_of("strategy:planned,planned_max_plans:0").find("planned_max_plans"),
            std::string::npos);
  EXPECT_NE(planned_error_of("strategy:caching,planned_steps:auto").find("planned_steps"),
            std::string::npos);
  EXPECT_NE(
      planned_error_of("strategy:planned,expandable_segments:True").find("expandable_segments"),
      std::string::npos);
  EXPECT_NE(planned_error_of("strategy:planned,static_pool_mb:64").find("static_pool_mb"),
            std::string::npos);
  EXPECT_NE(planned_error_of("strategy:planned,planned_fallback:static").find("planned_fallback"),
            std::string::npos);
  EXPECT_NE(planned_error_of("preload_threshold_kb:0").find("preload_threshold_kb"),
            std::string::npos);
  EXPECT_NE(
      planned_error_of("strategy:planned,planned_huge_pages:maybe").find("planned_huge_pages"),
      std::string::npos);
  EXPECT_NE(
      planned_error_of("strategy:caching,planned_huge_pages:False").find("planned_huge_pages"),
      std::string::npos);
}

TEST(PlannedConfig, HugePagesForTheArenaCanBeTurnedOff) {
  Built b = build(parse_config("strategy:planned,planned_huge_pages:False"));
  auto* planned = dynamic_cast<PlannedAllocator*>(b.allocator.get());
  ASSERT_NE(planned, nullptr);
  EXPECT_FALSE(planned->options().huge_pages);
  bool listed = false;
  for (const auto& [key, value] : b.settings)
    if (key == "planned_huge_pages") listed = value == "False";
  EXPECT_TRUE(listed);
}

TEST(PlannedConfig, DeferralIsOnByDefaultAndOffForReplays) {
  Built b = build(parse_config("strategy:planned"));
  auto* planned = dynamic_cast<PlannedAllocator*>(b.allocator.get());
  ASSERT_NE(planned, nullptr);
  EXPECT_TRUE(planned->options().defer_plans);
  Built r = build(parse_config(for_replay("strategy:planned")));
  planned = dynamic_cast<PlannedAllocator*>(r.allocator.get());
  ASSERT_NE(planned, nullptr);
  EXPECT_FALSE(planned->options().defer_plans);
  EXPECT_NE(planned_error_of("strategy:caching,planned_defer:False").find("planned_defer"),
            std::string::npos);
}

TEST(PlannedConfig, ForReplayAddsOnlyWhatAppliesAndWasNotGiven) {
  EXPECT_EQ(for_replay("strategy:planned"),
            "strategy:planned,planned_defer:False,cache_decay_ms:0");
  EXPECT_EQ(for_replay("strategy:planned,planned_fallback:direct"),
            "strategy:planned,planned_fallback:direct,planned_defer:False");
  EXPECT_EQ(for_replay("strategy:planned,planned_defer:True,cache_decay_ms:5"),
            "strategy:planned,planned_defer:True,cache_decay_ms:5");
  EXPECT_EQ(for_replay(""), "cache_decay_ms:0");  // the default strategy is caching
  EXPECT_EQ(for_replay("strategy:static"), "strategy:static");
  EXPECT_EQ(for_replay("strategy:system"), "strategy:system");
  // Every result is a valid configuration.
  for (const char* text : {"strategy:planned", "", "strategy:caching,expandable_segments:True"})
    EXPECT_NO_THROW(build(parse_config(for_replay(text)))) << text;
  EXPECT_THROW(for_replay("strategy:magic"), InvalidInput);
}

TEST(DirectAllocator, EveryBlockIsASegmentReturnedOnFree) {
  Built b = build(parse_config("strategy:planned"));
  auto device = b.device;
  DirectAllocator d(device);
  void* p = d.allocate(100000);
  void* q = d.allocate(5000);
  EXPECT_EQ(d.stats().segment.all.current, 2);
  EXPECT_EQ(d.stats().allocated_bytes.all.current, 105000);
  d.deallocate(p);
  EXPECT_THROW(d.deallocate(p), InvalidInput);
  EXPECT_THROW(d.allocate(0), InvalidInput);
  d.deallocate(q);
  auto s = d.stats();
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.reserved_bytes.all.current, 0);
  EXPECT_EQ(s.reserved_bytes.all.peak, 105000);
}

}  // namespace
}  // namespace modelmem::config
