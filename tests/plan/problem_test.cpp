#include "modelmem/plan/problem.hpp"

#include <gtest/gtest.h>

#include "modelmem/core/error.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {
Problem three_buffers() {
  Problem p;
  p.buffers = {{"a", 100, 0, 10}, {"b", 50, 5, 15}, {"c", 70, 10, 20}};
  return p;
}
}  // namespace

TEST(LowerBound, SweepTreatsTouchingIntervalsAsDisjoint) {
  Problem p = three_buffers();
  // a and b overlap on [5,10): 150. b and c overlap on [10,15): 120. a and c touch at 10.
  EXPECT_EQ(lower_bound(p), 150u);
  Peak pk = peak(p);
  EXPECT_EQ(pk.bytes, 150u);
  EXPECT_EQ(pk.step, 5);
  EXPECT_EQ(pk.live, (std::vector<std::size_t>{0, 1}));
}

TEST(LowerBound, EmptyProblemIsZero) {
  EXPECT_EQ(lower_bound(Problem{}), 0u);
}

TEST(Validate, AcceptsDisjointPlanAndReportsOverlap) {
  Problem p = three_buffers();
  Plan ok{{0, 100, 0}, 150};
  EXPECT_TRUE(validate(p, ok)) << validate(p, ok).message;
  Plan bad{{0, 99, 0}, 149};
  auto v = validate(p, bad);
  EXPECT_FALSE(v);
  EXPECT_NE(v.message.find("'a'"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("'b'"), std::string::npos) << v.message;
}

TEST(Validate, ChecksAlignmentCapacityAndArena) {
  Problem p = three_buffers();
  p.buffers[1].alignment = 64;
  EXPECT_FALSE(validate(p, Plan{{0, 100, 0}, 150}));  // 100 % 64 != 0
  EXPECT_TRUE(validate(p, Plan{{0, 128, 0}, 178}));
  p.capacity = 170;
  EXPECT_FALSE(validate(p, Plan{{0, 128, 0}, 178}));
  p.capacity.reset();
  EXPECT_FALSE(validate(p, Plan{{0, 128, 0}, 200}));  // wrong arena size
  EXPECT_FALSE(validate(p, Plan{{0, 128}, 178}));     // wrong count
}

TEST(CheckProblem, RejectsMalformedBuffers) {
  Problem p = three_buffers();
  p.buffers[0].size = 0;
  EXPECT_THROW(check_problem(p), InvalidInput);
  p = three_buffers();
  p.buffers[1].end = p.buffers[1].start;
  EXPECT_THROW(check_problem(p), InvalidInput);
  p = three_buffers();
  p.buffers[2].id = "a";
  EXPECT_THROW(check_problem(p), InvalidInput);
  p = three_buffers();
  p.buffers[0].size = SIZE_MAX;
  EXPECT_THROW(check_problem(p), InvalidInput);
}
