// The plan file writer: the standard members, extras, escaping, and that the plan-file reader
// (what the `plan:` config key uses) reads what it writes.
#include "modelmem/plan/plan_json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_file.hpp"

namespace modelmem::plan {
namespace {

Problem two_buffers() {
  Problem p;
  p.name = "two \"quoted\"\tbuffers";
  p.buffers.push_back({"a", 100, 0, 2, 1});
  p.buffers.push_back({"b\n", 50, 1, 3, 16});
  return p;
}

TEST(PlanJson, WritesEveryStandardMemberInOrder) {
  Problem p = two_buffers();
  Plan plan{{0, 112}, 162};
  PlanInfo info;
  info.source = p.name;
  info.solver = "best-fit";
  info.weights_bytes = 1000;
  info.lower_bound = 150;
  info.capacity = 4096;
  const std::string text = plan_json_text(p, plan, info);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], "modelmem-plan");
  EXPECT_EQ(j["version"], kPlanFormatVersion);
  EXPECT_EQ(j["source"], p.name);
  EXPECT_EQ(j["arena_bytes"], 162);
  EXPECT_EQ(j["weights_bytes"], 1000);
  EXPECT_EQ(j["total_bytes"], 1162);
  EXPECT_EQ(j["lower_bound_bytes"], 150);
  EXPECT_EQ(j["proven_optimal"], false);
  EXPECT_EQ(j["capacity_bytes"], 4096);
  ASSERT_EQ(j["buffers"].size(), 2u);
  EXPECT_EQ(j["buffers"][1]["id"], "b\n");
  EXPECT_EQ(j["buffers"][1]["alignment"], 16);
  EXPECT_EQ(j["buffers"][1]["start"], 1);
  EXPECT_EQ(j["buffers"][1]["end"], 3);
  EXPECT_EQ(j["buffers"][1]["offset"], 112);
  EXPECT_LT(text.find("\"format\""), text.find("\"buffers\""));

  PlanSizes sizes = parse_plan_sizes(text, "plan.json");
  EXPECT_EQ(sizes.arena_bytes, 162u);
  EXPECT_EQ(sizes.weights_bytes, 1000u);
}

TEST(PlanJson, ExtrasFollowAndMustNotShadowStandardMembers) {
  Problem p = two_buffers();
  Plan plan{{0, 112}, 162};
  PlanInfo info;
  info.extra = {{"dims", "{\n  \"batch\": 8\n}"}, {"steps", "[\"conv\", \"relu\"]"}};
  auto j = nlohmann::json::parse(plan_json_text(p, plan, info));
  EXPECT_EQ(j["dims"]["batch"], 8);
  EXPECT_EQ(j["steps"][1], "relu");
  EXPECT_TRUE(j["capacity_bytes"].is_null());

  info.extra = {{"arena_bytes", "1"}};
  EXPECT_THROW(plan_json_text(p, plan, info), InvalidInput);
  info.extra = {{"x", ""}};
  EXPECT_THROW(plan_json_text(p, plan, info), InvalidInput);
}

TEST(PlanJson, OffsetsMustMatchTheBuffers) {
  Problem p = two_buffers();
  Plan plan{{0}, 100};
  EXPECT_THROW(plan_json_text(p, plan, {}), InvalidInput);
}

TEST(PlanJson, EmptyProblemAndControlCharacters) {
  Problem p;
  auto j = nlohmann::json::parse(plan_json_text(p, Plan{}, {}));
  EXPECT_TRUE(j["buffers"].empty());
  EXPECT_EQ(json_quote(std::string("a\x01\\b", 4)), "\"a\\u0001\\\\b\"");
}

}  // namespace
}  // namespace modelmem::plan
