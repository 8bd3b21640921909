#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_file.hpp"

namespace modelmem::plan {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_plan_sizes(json, "p.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "no error";
}

TEST(PlanFile, ReadsTheTwoTopLevelIntegers) {
  PlanSizes s = parse_plan_sizes(R"({"arena_bytes": 1048576, "weights_bytes": 2048})", "p");
  EXPECT_EQ(s.arena_bytes, 1048576u);
  EXPECT_EQ(s.weights_bytes, 2048u);
  EXPECT_EQ(s.total(), 1050624u);
}

TEST(PlanFile, SkipsEverythingElseButChecksItsSyntax) {
  const char* json = R"({
    "model": "resnet50.onnx", "escaped": "a\"b\\c\u00e9\n",
    "blocks": [{"id": 0, "offset": 0, "size": 512, "lifetime": [0, 3]},
               {"id": 1, "offset": 512, "size": 1.5e3, "ok": true, "x": null, "y": false}],
    "nested": {"arena_bytes": 99},
    "arena_bytes": 4096,
    "weights_bytes": 0,
    "lower_bound": -1.25E-2
  })";
  PlanSizes s = parse_plan_sizes(json, "p");
  EXPECT_EQ(s.arena_bytes, 4096u);  // the nested one does not count
  EXPECT_EQ(s.weights_bytes, 0u);
}

// A plan in the writer's format: three buffers, b0 and b1 live together, b2 reusing b0's place.
std::string plan_with(const std::string& buffers, std::size_t arena = 1536,
                      const std::string& head = R"("format": "modelmem-plan", "version": 1,)") {
  return "{" + head + R"( "arena_bytes": )" + std::to_string(arena) +
         R"(, "weights_bytes": 100, "buffers": [)" + buffers + "]}";
}

const std::string kGoodBuffers =
    R"({"id": "b0", "size": 512, "alignment": 256, "start": 0, "end": 2, "offset": 0},
       {"id": "b1", "size": 1024, "alignment": 256, "start": 1, "end": 3, "offset": 512},
       {"id": "b2", "size": 512, "alignment": 256, "start": 2, "end": 4, "offset": 0})";

TEST(PlanFile, AValidPlanWithItsBuffersIsRead) {
  PlanSizes s = parse_plan_sizes(plan_with(kGoodBuffers), "p.json");
  EXPECT_EQ(s.arena_bytes, 1536u);
  EXPECT_EQ(s.total(), 1636u);
  EXPECT_EQ(parse_plan_sizes(plan_with("", 0), "p.json").arena_bytes, 0u);
}

// Each bad plan is refused before a pool is sized from it, naming the first bad buffer.
TEST(PlanFile, BadPlansAreRefusedNamingTheFirstBadBuffer) {
  const std::string b0 = R"({"id": "b0", "size": 512, "start": 0, "end": 2, "offset": 0},)";
  const std::vector<std::pair<std::string, std::string>> bad{
      // offset + size past the arena
      {plan_with(b0 + R"({"id": "b1", "size": 1024, "start": 1, "end": 3, "offset": 1024})"),
       "p.json: plan file: buffer 1 ('b1'): offset 1024 + size 1024 = 2048 passes the arena of "
       "1536 bytes"},
      // a negative offset, an offset of 2^64
      {plan_with(b0 + R"({"id": "b1", "size": 8, "start": 1, "end": 3, "offset": -8})"),
       "\"buffers[1].offset\" must be a non-negative integer"},
      {plan_with(b0 + R"({"id": "b1", "size": 8, "start": 1, "end": 3,
                          "offset": 18446744073709551616})"),
       "\"buffers[1].offset\" does not fit in 64 bits"},
      {plan_with(b0 + R"({"id": "b1", "size": 8, "start": 1, "end": 3,
                          "offset": 18446744073709551615})"),
       "p.json: plan file: buffer 1 ('b1'): offset 18446744073709551615 + size 8 overflows 64 "
       "bits"},
      // two buffers overlapping while both live
      {plan_with(b0 + R"({"id": "b1", "size": 1024, "start": 1, "end": 3, "offset": 256})", 1280),
       "p.json: plan file: buffers 'b0' [0, 512) and 'b1' [256, 1280) overlap in address while "
       "both live in [1, 2)"},
      // an arena total that disagrees with the buffers
      {plan_with(kGoodBuffers, 4096),
       "p.json: plan file: plan says arena 4096 but buffers end at 1536"},
      {plan_with(kGoodBuffers, 1536,
                 R"("format": "modelmem-plan", "version": 1, "total_bytes": 99,)"),
       "p.json: plan file: total_bytes 99 is not arena_bytes 1536 + weights_bytes 100"},
      // an unknown version or format
      {plan_with(kGoodBuffers, 1536, R"("format": "modelmem-plan", "version": 2,)"),
       "p.json: plan file: version 2 is not one this reader knows (1)"},
      {plan_with(kGoodBuffers, 1536, R"("format": "other-plan", "version": 1,)"),
       "p.json: plan file: \"format\" is \"other-plan\", not \"modelmem-plan\""},
      // a lifetime that is empty, a misaligned offset, a buffer without an offset
      {plan_with(b0 + R"({"id": "b1", "size": 8, "start": 3, "end": 3, "offset": 512})", 520),
       "p.json: plan file: buffer 'b1': end 3 is not after start 3"},
      {plan_with(b0 + R"({"id": "b1", "size": 8, "alignment": 64, "start": 1, "end": 3,
                          "offset": 520})",
                 528),
       "p.json: plan file: buffer 'b1': offset 520 breaks its alignment 64"},
      {plan_with(b0 + R"({"id": "b1", "size": 8, "start": 1, "end": 3})"),
       "buffers[1] ('b1') has no \"offset\""},
  };
  for (const auto& [json, says] : bad) {
    SCOPED_TRACE(json);
    const std::string msg = error_of(json);
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(PlanFile, WeightsAreOptional) {
  EXPECT_EQ(parse_plan_sizes(R"({"arena_bytes":7})", "p").weights_bytes, 0u);
}

TEST(PlanFile, RejectsMalformedFilesWithLineAndColumn) {
  EXPECT_NE(error_of("").find("p.json:1:1"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("top level must be a JSON object"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"weights_bytes": 1})").find("missing the top-level integer \"arena_bytes\""),
      std::string::npos);
  EXPECT_NE(error_of("{\n  \"arena_bytes\": -5\n}").find("p.json:2:18"), std::string::npos)
      << error_of("{\n  \"arena_bytes\": -5\n}");
  EXPECT_NE(error_of(R"({"arena_bytes": 1.0})").find("non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1e6})").find("non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 012})").find("non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": "12"})").find("non-negative integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 99999999999999999999})").find("64 bits"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1, "arena_bytes": 2})").find("duplicate"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1} x)").find("after the top-level object"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1,})").find("expected a key"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1 "x": 2})").find("expected ','"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": [1 2], "arena_bytes": 1})").find("expected ',' or ']'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a": "\q", "arena_bytes": 1})").find("bad escape"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": "\u12g4", "arena_bytes": 1})").find("bad \\u escape"),
            std::string::npos);
  EXPECT_NE(error_of("{\"a\": \"x\ty\", \"arena_bytes\": 1}").find("control character"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a": tru, "arena_bytes": 1})").find("unexpected character"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a": 1., "arena_bytes": 1})").find("malformed number"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": "open)").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of(R"({"arena_bytes": 1)").find("expected ','"), std::string::npos);
}

TEST(PlanFile, DeepNestingIsAnErrorNotACrash) {
  std::string deep =
      "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + ", \"arena_bytes\": 1}";
  EXPECT_NE(error_of(deep).find("nesting deeper than"), std::string::npos);
}

TEST(PlanFile, ReadsFiles) {
  std::string path = ::testing::TempDir() + "config_plan_file_test.json";
  {
    std::ofstream out(path);
    out << R"({"arena_bytes": 100, "weights_bytes": 28})";
  }
  EXPECT_EQ(read_plan_sizes(path).total(), 128u);
  std::remove(path.c_str());
  try {
    read_plan_sizes(path);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open: no such plan file"), std::string::npos);
  }
  // A FIFO (it would block) and a device (it would never end): refused at once, unread.
  const std::string fifo =
      ::testing::TempDir() + "plan_file_test_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [p, what] :
       {std::pair{fifo, std::string("a FIFO")},
        std::pair{std::string("/dev/zero"), std::string("a character device")}}) {
    try {
      read_plan_sizes(p);
      ADD_FAILURE() << p;
    } catch (const InvalidInput& e) {
      EXPECT_EQ(std::string(e.what()), p + ": is " + what + ", not a plan file");
    }
  }
  std::remove(fifo.c_str());
  EXPECT_THROW((PlanSizes{SIZE_MAX, 1}.total()), InvalidInput);
}

}  // namespace
}  // namespace modelmem::plan
