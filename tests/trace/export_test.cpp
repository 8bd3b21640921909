#include "modelmem/trace/export.hpp"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "synthetic.hpp"

namespace modelmem::trace {
namespace {

using testing::TraceBuilder;

TEST(Perfetto, JsonParsesAndHoldsCountersPerPool) {
  TraceBuilder b("perfetto");
  b.mark("step_begin");
  b.segment(0x1000000, 2 << 20);
  auto x = b.alloc(1000, 0);
  auto y = b.alloc(3000, 1);
  b.oom(1ull << 40);
  b.free(x, 1000, 0);
  b.mark("step_end");
  b.free(y, 3000, 1);
  std::stringstream out;
  write_perfetto_json(b.trace(), out);
  nlohmann::json doc = nlohmann::json::parse(out.str());  // throws if malformed
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<std::string, std::vector<nlohmann::json>> counters;
  std::vector<std::string> instants;
  std::vector<std::string> slices;
  for (const auto& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "C") counters[e["name"]].push_back(e["args"]);
    if (ph == "i") instants.push_back(e["name"]);
    if (ph == "X") slices.push_back(e["name"]);
    if (ph != "M") {
      EXPECT_TRUE(e["ts"].is_number());
    }
  }
  ASSERT_EQ(counters.count("pool 0"), 1u);
  ASSERT_EQ(counters.count("pool 1"), 1u);
  // pool 0: segment (reserved 2 MiB), alloc 1000, free -> 0
  const auto& p0 = counters["pool 0"];
  ASSERT_EQ(p0.size(), 3u);
  EXPECT_EQ(p0[0]["reserved"], 2 << 20);
  EXPECT_EQ(p0[1]["allocated"], 1000);
  EXPECT_EQ(p0[2]["allocated"], 0);
  const auto& p1 = counters["pool 1"];
  ASSERT_EQ(p1.size(), 2u);
  EXPECT_EQ(p1[0]["allocated"], 3000);
  EXPECT_EQ(p1[1]["allocated"], 0);
  EXPECT_EQ(instants, (std::vector<std::string>{"step_begin", "oom", "step_end"}));
  EXPECT_EQ(slices, (std::vector<std::string>{"step 0"}));
}

TEST(Perfetto, NoReservedSeriesWithoutSegmentEvents) {
  TraceBuilder b("plain");
  auto x = b.alloc(64);
  b.free(x, 64);
  b.free(0x999, 64);  // unknown: skipped, no counter point
  std::stringstream out;
  write_perfetto_json(b.trace(), out);
  auto doc = nlohmann::json::parse(out.str());
  int points = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "C") {
      ++points;
      EXPECT_FALSE(e["args"].contains("reserved"));
    }
  EXPECT_EQ(points, 2);
}

TEST(MemorySeries, LostFreeStopsCountingAtTheReuse) {
  TraceBuilder b("lost");
  auto x = b.alloc(100);
  b.alloc_at(x, 50);
  bool has_reserved = true;
  auto series = memory_series(b.trace(), match_blocks(b.trace()), &has_reserved);
  EXPECT_FALSE(has_reserved);
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[1].allocated, 50u);
}

}  // namespace
}  // namespace modelmem::trace
