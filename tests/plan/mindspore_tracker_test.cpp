// MindSpore's memory_block.csv read as a planning problem (files written here in its layout).
#include <gtest/gtest.h>

#include <string>

#include "../support/mindspore_tracker.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/plan/mindspore_tracker.hpp"
#include "modelmem/plan/plan_io.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
const std::string kHeader = test::kTrackerHeaderNew;

std::string row(const std::string& start, const std::string& end, const std::string& size,
                const std::string& extra_stack = "") {
  return start + "," + end + ",0x12c000000000,0,Ascend," + size + "," + size +
         ",0,/ms/a.cc,1,WorkSpace,1,Kernel_1,Default/Add-op1,kernel_graph_0,{2},2,File:/x.py" +
         extra_stack + ";Line:3;Function:f|,0,0,\n";
}

std::string tracker_error_of(const std::string& text) {
  try {
    parse_tracker_blocks(text, "memory_block.csv");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MindSporeTracker, ReadsTheSimulatedRunAsAProblem) {
  const std::string text = test::example_run(6).text();
  ASSERT_TRUE(is_tracker_blocks(text));
  TrackerFile f = parse_tracker_blocks(text, "memory_block.csv");
  EXPECT_EQ(f.blocks.size(), 3u + 6 * 4);
  EXPECT_EQ(f.inside_somas, 1u);
  EXPECT_FALSE(f.blocks[0].end);  // the weights are never freed
  EXPECT_EQ(f.blocks[0].type, "Weight");
  EXPECT_EQ(f.blocks[3].node, "Default/network/MatMul-op1");
  ASSERT_TRUE(f.blocks[3].address);
  Problem p = tracker_problem(f);
  EXPECT_EQ(p.buffers.size(), f.blocks.size());
  EXPECT_EQ(p.buffers[0].id, "L2");  // the file line of the block
  EXPECT_EQ(p.buffers[0].end, f.last_stamp + 1);
  EXPECT_EQ(lower_bound(p), 18 * MiB);  // 3 weights of 4 MiB + 2 + 3 + 1 MiB in a step
  // The CSV readers take the file as it is (`modelmem solve memory_block.csv`).
  EXPECT_EQ(lower_bound(parse_problem_csv(text, "memory_block.csv")), 18 * MiB);
}

TEST(MindSporeTracker, ReadsTheOlderLayoutAndOtherWriters) {
  TrackerFile old = parse_tracker_blocks(test::example_run(2, false).text(), "old.csv");
  EXPECT_EQ(old.blocks.size(), 3u + 2 * 4);
  // Without the trailing commas, with CRLF, quoted fields (a CSV library) and a CPU row.
  const std::string text =
      "start_time_stamp,end_time_stamp,device_addr,stream_id,pool_type,size,node_name\r\n"
      "1,4,0x1000,0,Ascend,512,\"Default/a,b\"\r\n"
      "2,3,0x2000,0,CPU,512,host\r\n"
      "5,9223372036854775807,0x3000,1,Ascend,1024,c\r\n";
  TrackerFile f = parse_tracker_blocks(text, "other.csv");
  ASSERT_EQ(f.blocks.size(), 2u);
  EXPECT_EQ(f.blocks[0].node, "Default/a,b");
  EXPECT_EQ(f.host_rows, 1u);
  EXPECT_EQ(f.blocks[1].stream, 1u);
  EXPECT_EQ(f.last_stamp, 5);
}

TEST(MindSporeTracker, CommasInThePythonStackStayInIt) {
  TrackerFile f = parse_tracker_blocks(kHeader + "\n" + row("1", "2", "512", ",with,commas"),
                                       "memory_block.csv");
  ASSERT_EQ(f.blocks.size(), 1u);
  EXPECT_EQ(f.blocks[0].size, 512u);
}

TEST(MindSporeTracker, MalformedRowsNameFileLineAndColumn) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {kHeader + "\n" + row("1", "2", "abc"),
       "memory_block.csv:2: column 'size': 'abc' is not a non-negative whole number"},
      {kHeader + "\n" + row("1", "2", "-5"), "memory_block.csv:2: column 'size': '-5'"},
      {kHeader + "\n" + row("x", "2", "5"),
       "memory_block.csv:2: column 'start_time_stamp': 'x' is not a whole number"},
      {kHeader + "\n" + row("7", "3", "5"),
       "memory_block.csv:2: column 'end_time_stamp': 3 is not after start_time_stamp 7"},
      {kHeader + "\n" + row("-4", "3", "5"), "memory_block.csv:2: column 'start_time_stamp': -4"},
      {kHeader + "\n\n" + row("1", "2", "5") + "1,2,0x10\n",
       "memory_block.csv:4: 3 fields where the header has 20"},
      {"start_time_stamp,end_time_stamp,device_addr,size\n1,2,zz,5\n",
       "memory_block.csv:2: column 'device_addr': 'zz' is not an address"},
      {"start_time_stamp,end_time_stamp,stream_id\n1,2,0\n",
       "memory_block.csv:1: missing column 'size'"},
      {"start_time_stamp,end_time_stamp,size\n1,2,\"5\n",
       "memory_block.csv:2: unterminated quoted field"},
      {"start_time_stamp,end_time_stamp,size\n1,2,3\x01\n",
       "memory_block.csv:2: not a CSV text file (control byte 0x01)"},
      {kHeader + "\n" + row("9223372036854775807", "9223372036854775807", "5"),
       "memory_block.csv:2: column 'start_time_stamp': 9223372036854775807 is too large"},
      {kHeader + "\n" + row("1", "9007199254740993", "5"),
       "memory_block.csv:2: column 'end_time_stamp': 9007199254740993 is too large for a time "
       "stamp (at most 2^53"},
      {"start_time_stamp,end_time_stamp,size\n1,2,99999999999999999999\n",
       "memory_block.csv:2: column 'size': 99999999999999999999 does not fit in 64 bits"},
  };
  for (const Case& c : cases) {
    const std::string msg = tracker_error_of(c.text);
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << "got: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_EQ(tracker_error_of("\n\n"), "memory_block.csv: empty file, no memory_block.csv header");
}

TEST(MindSporeTracker, SkipBadSkipsRowsWithAWarningEach) {
  const std::string text = kHeader + "\n" + row("1", "2", "abc") + row("3", "4", "512");
  TrackerFile f = parse_tracker_blocks(text, "m.csv", 1, /*skip_bad=*/true);
  EXPECT_EQ(f.blocks.size(), 1u);
  EXPECT_EQ(f.skipped_lines, 1u);
  ASSERT_FALSE(f.warnings.empty());
  EXPECT_EQ(f.warnings[0].rfind("m.csv:2: column 'size'", 0), 0u) << f.warnings[0];
}

TEST(MindSporeTracker, AFileWithoutDeviceBlocksIsNoProblem) {
  const std::string text = kHeader + "\n" + row("-1", "-1", "512");
  TrackerFile f = parse_tracker_blocks(text, "m.csv");
  EXPECT_EQ(f.inside_somas, 1u);
  try {
    tracker_problem(f);
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_STREQ(e.what(),
                 "m.csv: no device memory block to plan (1 rows inside SOMAS blocks, 0 of pool "
                 "CPU, 0 of 0 bytes)");
  }
  EXPECT_FALSE(is_tracker_blocks("id,lower,upper,size\n"));
}
