#include <gtest/gtest.h>

#include <sstream>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_io.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {

/// The InvalidInput message for parsing `text`, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_problem_csv(text, "in.csv");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_BAD_INPUT(text, location, words)                            \
  do {                                                                     \
    std::string msg_ = error_of(text);                                     \
    EXPECT_EQ(msg_.rfind(location, 0), 0u) << "message: " << msg_;         \
    EXPECT_NE(msg_.find(words), std::string::npos) << "message: " << msg_; \
    EXPECT_EQ(msg_.find('\n'), std::string::npos) << "message: " << msg_;  \
  } while (0)

}  // namespace

TEST(CsvRead, MiniMallocColumns) {
  Problem p = parse_problem_csv("id,lower,upper,size\n0,0,10,4\nb,5,7,8\n", "x.csv");
  ASSERT_EQ(p.buffers.size(), 2u);
  EXPECT_EQ(p.name, "x.csv");
  EXPECT_EQ(p.buffers[1].id, "b");
  EXPECT_EQ(p.buffers[1].start, 5);
  EXPECT_EQ(p.buffers[1].end, 7);
  EXPECT_EQ(p.buffers[1].size, 8u);
  EXPECT_EQ(p.buffers[1].alignment, 1u);
  EXPECT_FALSE(p.capacity);
}

TEST(CsvRead, AliasesInclusiveEndAlignmentAndLayout) {
  // Columns in another order, aliases, inclusive end, CRLF, blank lines, spaces, quoted id.
  Problem p = parse_problem_csv(
      "buffer_id, size ,begin,end,alignment,hint\r\n\r\n\"a,\"\"b\"\"\", 16 , 3, 3 ,64,0\r\n"
      "c,1,0,9,1,\n\n",
      "x.csv");
  ASSERT_EQ(p.buffers.size(), 2u);
  EXPECT_EQ(p.buffers[0].id, "a,\"b\"");
  EXPECT_EQ(p.buffers[0].start, 3);
  EXPECT_EQ(p.buffers[0].end, 4);  // inclusive end 3 -> upper 4
  EXPECT_EQ(p.buffers[0].size, 16u);
  EXPECT_EQ(p.buffers[0].alignment, 64u);
  EXPECT_EQ(p.buffers[1].end, 10);
  p = parse_problem_csv("buffer,start,upper,size\nx,1,2,3\n", "y.csv");
  EXPECT_EQ(p.buffers[0].start, 1);
  EXPECT_EQ(p.buffers[0].end, 2);
}

TEST(CsvRead, HeaderOnlyIsAnEmptyProblem) {
  EXPECT_TRUE(parse_problem_csv("id,lower,upper,size\n", "x.csv").buffers.empty());
}

TEST(CsvRead, ReadsTheChallengingInstances) {
  Problem p = read_problem_csv(MODELMEM_SHARED_DATA "/minimalloc/C.1048576.csv");
  EXPECT_EQ(p.buffers.size(), 203u);
  EXPECT_EQ(lower_bound(p), 1039360u);
}

TEST(CsvWrite, RoundTripsThroughThePlanReader) {
  Problem p;
  p.buffers = {{"plain", 10, 0, 5, 1},
               {"with,comma", 20, 2, 9, 8},
               {"q\"uote", 5, 4, 6, 1},
               {" padded ", 1, 0, 1, 1}};
  Plan plan{{0, 16, 40, 36}, 45};
  std::ostringstream out;
  write_plan_csv(out, p, plan);
  EXPECT_EQ(out.str().substr(0, out.str().find('\n')), "id,lower,upper,size,alignment,offset");
  PlannedProblem back = parse_plan_csv(out.str(), "back.csv");
  ASSERT_EQ(back.problem.buffers.size(), p.buffers.size());
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    EXPECT_EQ(back.problem.buffers[i].id, p.buffers[i].id);
    EXPECT_EQ(back.problem.buffers[i].start, p.buffers[i].start);
    EXPECT_EQ(back.problem.buffers[i].end, p.buffers[i].end);
    EXPECT_EQ(back.problem.buffers[i].size, p.buffers[i].size);
    EXPECT_EQ(back.problem.buffers[i].alignment, p.buffers[i].alignment);
  }
  EXPECT_EQ(back.plan.offsets, plan.offsets);
  EXPECT_EQ(back.plan.arena_size, plan.arena_size);
}

TEST(CsvWrite, OmitsAlignmentWhenNoBufferHasOne) {
  Problem p;
  p.buffers = {{"a", 10, 0, 5}};
  std::ostringstream out;
  write_plan_csv(out, p, Plan{{7}, 17});
  EXPECT_EQ(out.str(), "id,lower,upper,size,offset\na,0,5,10,7\n");
  EXPECT_THROW(write_plan_csv(out, p, Plan{{}, 0}), InvalidInput);
}

TEST(CsvPlan, OffsetColumnIsRequiredForPlans) {
  EXPECT_THROW(parse_plan_csv("id,lower,upper,size\na,0,1,1\n", "p.csv"), InvalidInput);
  // The problem reader accepts and ignores it.
  EXPECT_EQ(parse_problem_csv("id,lower,upper,size,offset\na,0,1,1,5\n", "p.csv").buffers.size(),
            1u);
}

// One test per kind of bad input from the issue: each names the file and line.
TEST(CsvBadInput, EmptyFile) {
  EXPECT_BAD_INPUT("", "in.csv: ", "empty file");
  EXPECT_BAD_INPUT("\n  \r\n\n", "in.csv: ", "empty file");
}

TEST(CsvBadInput, MissingColumn) {
  EXPECT_BAD_INPUT("id,lower,size\n0,1,2\n", "in.csv:1: ", "missing column 'upper'");
  EXPECT_BAD_INPUT("id,upper,size\n0,1,2\n", "in.csv:1: ", "missing column 'lower'");
  EXPECT_BAD_INPUT("lower,upper,size\n0,1,2\n", "in.csv:1: ", "missing column 'id'");
  EXPECT_BAD_INPUT("id,lower,upper\n0,1,2\n", "in.csv:1: ", "missing column 'size'");
}

TEST(CsvBadInput, UnknownRepeatedOrConflictingColumn) {
  EXPECT_BAD_INPUT("id,lower,upper,size,align\n", "in.csv:1: ", "unknown column 'align'");
  EXPECT_BAD_INPUT("id,lower,start,upper,size\n", "in.csv:1: ", "repeats");
  EXPECT_BAD_INPUT("id,lower,upper,end,size\n", "in.csv:1: ", "both 'upper'");
}

TEST(CsvBadInput, NonNumericValue) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,1\nb,0,x1,1\n",
                   "in.csv:3: ", "'x1' in column 'upper' is not a non-negative integer");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,1.5\n", "in.csv:2: ", "column 'size'");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,,1,1\n", "in.csv:2: ", "empty value in column 'lower'");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,+1\n", "in.csv:2: ", "not a non-negative integer");
}

TEST(CsvBadInput, NegativeValue) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,-8\n",
                   "in.csv:2: ", "negative value -8 in column 'size'");
  EXPECT_BAD_INPUT("id,lower,upper,size,alignment\na,0,1,8,-4\n",
                   "in.csv:2: ", "negative value -4 in column 'alignment'");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,-x,1,1\n",
                   "in.csv:2: ", "'-x' in column 'lower' is not an integer");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,-4611686018427387905,1,1\n",
                   "in.csv:2: ", "too far below zero for a time step");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,-99999999999999999999,1,1\n",
                   "in.csv:2: ", "too far below zero");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,-1,-3,1\n",
                   "in.csv:2: ", "upper -3 is not after lower -1");
}

// MindSpore's SOMAS files start some tensors at -1: negative times are read as they are (only
// differences matter), and written back unchanged.
TEST(CsvRead, NegativeTimesAreKept) {
  Problem p = parse_problem_csv("id,lower,upper,size\na,-1,3,4\nb,0,2,8\nc,-5,-1,2\n", "in.csv");
  ASSERT_EQ(p.buffers.size(), 3u);
  EXPECT_EQ(p.buffers[0].start, -1);
  EXPECT_EQ(p.buffers[2].start, -5);
  EXPECT_EQ(p.buffers[2].end, -1);
  EXPECT_EQ(lower_bound(p), 12u);
  Problem q = parse_problem_csv("id,start,end,size\na,-2,-2,4\n", "in.csv");
  EXPECT_EQ(q.buffers[0].end, -1);
  Plan plan{{0, 4, 0}, 12};
  std::ostringstream out;
  write_plan_csv(out, p, plan);
  PlannedProblem back = parse_plan_csv(out.str(), "back.csv");
  EXPECT_EQ(back.problem.buffers[2].start, -5);
  EXPECT_EQ(back.problem.buffers[0].end, 3);
}

TEST(CsvRead, SomasTinyBertStartsAtMinusOne) {
  Problem p = read_problem_csv(MODELMEM_SHARED_DATA "/dsa/somas_tiny_bert.csv");
  EXPECT_EQ(p.buffers.size(), 1821u);
  EXPECT_EQ(p.buffers[0].start, -1);
}

// IREE's files carry IREE's own placement in an `offset` column: `solve` reads the problem and
// ignores the column (a plan file reader keeps it).
TEST(CsvRead, IreeOffsetColumnIsReadAsAPlan) {
  PlannedProblem p = read_plan_csv(MODELMEM_SHARED_DATA "/dsa/iree_first.csv");
  EXPECT_EQ(p.problem.buffers.size(), 56u);
  EXPECT_EQ(p.plan.offsets.size(), 56u);
  EXPECT_TRUE(validate(p.problem, p.plan));
  Problem q = read_problem_csv(MODELMEM_SHARED_DATA "/dsa/iree_first.csv");
  EXPECT_EQ(q.buffers.size(), 56u);
}

TEST(CsvBadInput, ValueOutOfRange) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,18446744073709551616\n",
                   "in.csv:2: ", "does not fit in 64 bits");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,9223372036854775808,1\n",
                   "in.csv:2: ", "too large for a time step");
  EXPECT_BAD_INPUT("id,start,end,size\na,0,9223372036854775807,1\n", "in.csv:2: ", "too large");
}

TEST(CsvBadInput, ZeroSizeOrAlignment) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,0\n", "in.csv:2: ", "size is zero (buffer 'a')");
  EXPECT_BAD_INPUT("id,lower,upper,size,alignment\na,0,1,4,0\n", "in.csv:2: ", "alignment is zero");
}

TEST(CsvBadInput, UpperNotAfterLower) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,1\nb,5,5,1\n",
                   "in.csv:3: ", "upper 5 is not after lower 5 (buffer 'b')");
  EXPECT_BAD_INPUT("id,lower,upper,size\nb,7,3,1\n", "in.csv:2: ", "upper 3 is not after lower 7");
  EXPECT_BAD_INPUT("id,start,end,size\nb,7,6,1\n", "in.csv:2: ", "end 6 is before start 7");
}

TEST(CsvBadInput, DuplicateId) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,1\nb,0,1,1\n\na,2,3,1\n",
                   "in.csv:5: ", "duplicate id 'a' (first on line 2)");
}

TEST(CsvBadInput, SizesOrOffsetsOverflow) {
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1,9223372036854775808\nb,5,6,9223372036854775808\n",
                   "in.csv:3: ", "total size of the buffers overflows 64 bits");
  EXPECT_BAD_INPUT("id,lower,upper,size,offset\na,0,1,2,18446744073709551615\n",
                   "in.csv:2: ", "offset + size overflows 64 bits");
}

TEST(CsvBadInput, NotCsv) {
  EXPECT_BAD_INPUT("hello world\n", "in.csv:1: ", "not a MiniMalloc CSV header");
  EXPECT_BAD_INPUT("{\"buffers\": []}\n", "in.csv:1: ", "not a MiniMalloc CSV header");
  EXPECT_BAD_INPUT(std::string("id,lower,upper,size\na,0,1\0,1\n", 27),
                   "in.csv:2: ", "not a CSV text file (control byte 0x00)");
  EXPECT_BAD_INPUT(
      "\x7f"
      "ELF\x02\x01\x01",
      "in.csv:1: ", "not a CSV text file");
  EXPECT_BAD_INPUT("id,lower,upper,size\na,0,1\n",
                   "in.csv:2: ", "has 3 fields but the header has 4");
  EXPECT_BAD_INPUT("id,lower,upper,size\n\"a,0,1,1\n", "in.csv:2: ", "unterminated quoted field");
  EXPECT_BAD_INPUT("id,lower,upper,size\na\"b,0,1,1\n", "in.csv:2: ", "stray quote");
  EXPECT_BAD_INPUT("id,lower,upper,size\n\"a\"x,0,1,1\n", "in.csv:2: ", "after the quoted field");
  EXPECT_BAD_INPUT("id,lower,upper,size\n,0,1,1\n", "in.csv:2: ", "empty id");
}

TEST(CsvBadInput, MissingFile) {
  try {
    read_problem_csv("/nonexistent/dir/x.csv");
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.csv: cannot open"), std::string::npos)
        << e.what();
  }
}
