#include "modelmem/plan/period.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace modelmem::plan {
namespace {

// Tokens 1000+ for warm-up, 0..999 inside steps, so warm-up never matches by chance.
std::vector<std::uint64_t> periodic(std::size_t warmup, const std::vector<std::uint64_t>& step,
                                    std::size_t repeats) {
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < warmup; ++i) out.push_back(1000 + i);
  for (std::size_t r = 0; r < repeats; ++r) out.insert(out.end(), step.begin(), step.end());
  return out;
}

std::vector<std::uint64_t> random_tokens(std::size_t n, std::uint64_t alphabet, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> out(n);
  for (auto& t : out) t = rng() % alphabet;
  return out;
}

TEST(Period, ExactRepetitionAfterWarmup) {
  auto step = random_tokens(37, 20, 1);
  auto seq = periodic(15, step, 6);
  Period p = detect_period(seq);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, 37u);
  EXPECT_EQ(p.start, 15u);
  EXPECT_EQ(p.repeats, 6u);
  EXPECT_DOUBLE_EQ(p.match, 1.0);
  EXPECT_EQ(p.mismatches, 0u);
}

TEST(Period, SmallVariationsStillRepeat) {
  auto step = random_tokens(50, 30, 2);
  auto seq = periodic(10, step, 8);
  seq[10 + 3 * 50 + 7] = 999;  // one step differs in two events
  seq[10 + 3 * 50 + 20] = 998;
  Period p = detect_period(seq);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, 50u);
  EXPECT_LT(p.match, 1.0);
  EXPECT_GE(p.match, 0.9);
  EXPECT_EQ(p.mismatches, 4u);  // each changed event differs from the step before and after
}

TEST(Period, StepWinsOverRepeatedLayerInsideIt) {
  // A transformer-like step: a prologue, ten identical layers, an epilogue.
  std::vector<std::uint64_t> layer = {10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<std::uint64_t> step = {1, 2, 3};
  for (int l = 0; l < 10; ++l) step.insert(step.end(), layer.begin(), layer.end());
  step.insert(step.end(), {4, 5});
  auto seq = periodic(7, step, 4);
  Period p = detect_period(seq);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, step.size());
  EXPECT_DOUBLE_EQ(p.match, 1.0);
  // The layer alone repeats too, but worse.
  Period layer_only = check_period(seq, layer.size());
  EXPECT_LT(layer_only.match, 1.0);
}

TEST(Period, RandomSequenceDoesNotRepeat) {
  auto seq = random_tokens(2000, 50, 3);
  Period p = detect_period(seq);
  EXPECT_FALSE(p.found);
}

TEST(Period, TooShortOrTooFewRepeats) {
  EXPECT_FALSE(detect_period(std::vector<std::uint64_t>{}).found);
  EXPECT_FALSE(detect_period(std::vector<std::uint64_t>{5}).found);
  auto step = random_tokens(40, 40, 4);
  auto once = periodic(5, step, 1);
  EXPECT_FALSE(detect_period(once).found);
  PeriodOptions three;
  three.min_repeats = 3;
  EXPECT_FALSE(detect_period(periodic(5, step, 2), three).found);
  EXPECT_TRUE(detect_period(periodic(5, step, 3), three).found);
}

TEST(Period, RepetitionOnlyInTailIsReportedWithItsStart) {
  auto seq = random_tokens(1000, 1000000, 5);
  for (int i = 0; i < 20; ++i) seq.push_back(i % 2 == 0 ? 7000000 : 7000001);
  EXPECT_FALSE(detect_period(seq).found);  // default: must cover half of the sequence
  PeriodOptions anywhere;
  anywhere.min_coverage = 0;
  Period p = detect_period(seq, anywhere);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, 2u);
  EXPECT_EQ(p.start, 1000u);
}

TEST(Period, EventsAndSizeGranularity) {
  std::mt19937 rng(6);
  std::vector<std::size_t> sizes = {4096, 8192, 65536, 1 << 20, 3072, 1024};
  std::vector<PeriodEvent> events;
  for (int step = 0; step < 5; ++step) {
    for (std::size_t s : sizes) events.push_back({false, s + 1 + rng() % 255});  // same 512 B bin
    for (std::size_t s : sizes) events.push_back({true, s});
  }
  PeriodOptions exact;
  Period jittery = detect_period(events, exact);
  PeriodOptions rounded;
  rounded.size_granularity = 512;
  Period p = detect_period(events, rounded);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, 12u);
  EXPECT_DOUBLE_EQ(p.match, 1.0);
  EXPECT_TRUE(!jittery.found || jittery.match < p.match);
  EXPECT_NE(period_token({false, 100}), period_token({true, 100}));
  EXPECT_EQ(period_token({false, 100}, 512), period_token({false, 512}, 512));
}

TEST(Period, MaxPeriodLimitsTheSearch) {
  auto step = random_tokens(100, 100, 7);
  auto seq = periodic(0, step, 4);
  PeriodOptions options;
  options.max_period = 50;
  EXPECT_FALSE(detect_period(seq, options).found);
  options.max_period = 100;
  EXPECT_EQ(detect_period(seq, options).length, 100u);
}

// The recorded traces: four identical inferences between marks, 536 events each for ResNet-50,
// 890 for the 12-layer encoder (whose identical layers must not be taken for the step).
struct Recorded {
  const char* file;
  std::size_t step_events;
};
void PrintTo(const Recorded& r, std::ostream* os) {
  *os << r.file << " (" << r.step_events << " events a step)";
}
class RecordedTrace : public ::testing::TestWithParam<Recorded> {};

TEST_P(RecordedTrace, PeriodIsOneInference) {
  std::filesystem::path path =
      std::filesystem::path(MODELMEM_SHARED_DATA) / "traces" / GetParam().file;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data missing: " << path;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<PeriodEvent> events;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string kind, time, address, size;
    std::getline(ss, kind, ',');
    std::getline(ss, time, ',');
    std::getline(ss, address, ',');
    std::getline(ss, size, ',');
    if (kind == "mark") continue;
    events.push_back({kind == "free", std::stoull(size)});
  }
  Period p = detect_period(events);
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.length, GetParam().step_events);
  EXPECT_GE(p.match, 0.95);
}
INSTANTIATE_TEST_SUITE_P(Shared, RecordedTrace,
                         ::testing::Values(Recorded{"torch_resnet50.events.csv", 536},
                                           Recorded{"torch_bert.events.csv", 890}),
                         [](const ::testing::TestParamInfo<Recorded>& info) {
                           std::string name = info.param.file;
                           return name.substr(0, name.find('.'));
                         });

}  // namespace
}  // namespace modelmem::plan
