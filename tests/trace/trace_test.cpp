#include "modelmem/trace/trace.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "modelmem/core/error.hpp"

namespace modelmem::trace {
namespace {

using alloc::EventKind;

std::filesystem::path shared_trace(const std::string& file) {
  return std::filesystem::path(MODELMEM_SHARED_DATA) / "traces" / file;
}

Trace parse(const std::string& text, ReadOptions options = {}) {
  std::istringstream in(text);
  return parse_trace(in, "t.csv", options);
}

std::string read_trace_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool has_warning(const Trace& t, const std::string& needle) {
  for (const auto& w : t.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

TEST(TraceCsv, RoundTripKeepsEveryField) {
  Trace t;
  t.name = "synthetic";
  t.dropped = 3;
  t.events.push_back({EventKind::kMark, 1, 0, 0, 0, 0, 2, "step_begin"});
  t.events.push_back({EventKind::kSegmentAlloc, 2, 0x7f0000000000, 20 << 20, 5, 2, 1, ""});
  t.events.push_back({EventKind::kAlloc, 3, 0x7f0000000200, 4096, 5, 2, 1, ""});
  t.events.push_back({EventKind::kMap, 4, 0x7f0000100000, 2 << 20, 0, 1, 0, ""});
  t.events.push_back({EventKind::kOom, 5, 0, 1ull << 40, 5, 2, 1, ""});
  t.events.push_back({EventKind::kFree, 6, 0x7f0000000200, 4096, 5, 2, 1, ""});
  t.events.push_back({EventKind::kUnmap, 7, 0x7f0000100000, 2 << 20, 0, 1, 0, ""});
  t.events.push_back({EventKind::kSegmentFree, 8, 0x7f0000000000, 20 << 20, 5, 2, 1, ""});
  t.events.push_back({EventKind::kMark, 9, 0, 0, 0, 0, 2, "step_end"});
  std::stringstream buffer;
  write_csv(t, buffer);
  Trace back = parse_trace(buffer, "back.csv");
  ASSERT_EQ(back.events.size(), t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    SCOPED_TRACE(i);
    const auto& a = t.events[i];
    const auto& b = back.events[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.time_ns, b.time_ns);
    EXPECT_EQ(a.thread, b.thread);
    EXPECT_EQ(a.label, b.label);
    if (a.kind != EventKind::kMark) {
      EXPECT_EQ(a.address, b.address);
      EXPECT_EQ(a.size, b.size);
      EXPECT_EQ(a.stream, b.stream);
      EXPECT_EQ(a.pool, b.pool);
    }
    EXPECT_EQ(b.line, i + 2);
  }
  EXPECT_EQ(back.dropped, 3u);
  EXPECT_TRUE(has_warning(back, "dropped 3 events"));
  // Writing what was read gives the same bytes.
  std::stringstream again;
  write_csv(back, again);
  EXPECT_EQ(again.str(), buffer.str());
}

TEST(TraceCsv, ReadsTheSharedPyTorchFormat) {
  auto path = shared_trace("torch_resnet50.events.csv");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data missing";
  Trace t = read_trace(path);
  EXPECT_EQ(t.events.size(), 2152u);
  EXPECT_TRUE(t.warnings.empty()) << t.warnings.front();
  EXPECT_EQ(t.events[0].kind, EventKind::kMark);
  EXPECT_EQ(t.events[0].label, "step_begin");
  EXPECT_EQ(t.events[1].kind, EventKind::kAlloc);
  EXPECT_EQ(t.events[1].address, 0x7fb208556040u);
  EXPECT_EQ(t.events[1].size, 3211264u);
  auto steps = marked_steps(t);
  ASSERT_EQ(steps.size(), 4u);
  for (const auto& s : steps) EXPECT_EQ(s.size(), 536u);
  Blocks blocks = match_blocks(t);
  EXPECT_EQ(blocks.unknown_frees, 0u);
  EXPECT_EQ(blocks.blocks.size(), 4u * 268u);
}

// One step of each shared trace converts to exactly the planning problem shipped next to it.
class StepProblem : public ::testing::TestWithParam<std::string> {};

TEST_P(StepProblem, MatchesTheSharedStepCsv) {
  auto events = shared_trace(GetParam() + ".events.csv");
  auto step_csv = shared_trace(GetParam() + ".step.csv");
  if (!std::filesystem::exists(events)) GTEST_SKIP() << "shared data missing";
  Trace t = read_trace(events);
  auto steps = marked_steps(t);
  ASSERT_GE(steps.size(), 2u);
  plan::Problem p = to_problem(t, steps[1]);
  std::ifstream in(step_csv);
  std::string line;
  std::getline(in, line);
  std::size_t i = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(i, p.buffers.size());
    std::ostringstream mine;
    const auto& b = p.buffers[i];
    mine << b.id << ',' << b.start << ',' << b.end << ',' << b.size;
    EXPECT_EQ(mine.str(), line) << "buffer " << i;
    ++i;
  }
  EXPECT_EQ(i, p.buffers.size());
  EXPECT_NO_THROW(plan::check_problem(p));
}
INSTANTIATE_TEST_SUITE_P(Shared, StepProblem,
                         ::testing::Values("torch_resnet50", "torch_resnet50_varbatch",
                                           "torch_bert", "torch_bert_varlen"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;  // the trace's name: Shared/StepProblem.X/torch_bert
                         });

TEST(TraceProblem, LiveInBlocksAndBadWindow) {
  Trace t = parse(
      "event,time_ns,address,size\n"
      "alloc,1,0x100,10\n"
      "mark,2,,,\n"
      "alloc,3,0x200,20\n"
      "free,4,0x100,10\n"
      "alloc,5,0x300,30\n");
  Window w{1, t.events.size()};
  plan::Problem inside = to_problem(t, w);
  ASSERT_EQ(inside.buffers.size(), 2u);
  EXPECT_EQ(inside.buffers[0].size, 20u);
  EXPECT_EQ(inside.buffers[0].start, 0);
  EXPECT_EQ(inside.buffers[0].end, 2);  // live at the end: the window's last index
  EXPECT_EQ(inside.buffers[1].start, 2);
  EXPECT_EQ(inside.buffers[1].end, 3);  // allocated at the last index: still one step long
  ProblemOptions with_live_in;
  with_live_in.include_live_in = true;
  plan::Problem all = to_problem(t, w, with_live_in);
  ASSERT_EQ(all.buffers.size(), 3u);
  EXPECT_EQ(all.buffers[0].size, 10u);
  EXPECT_EQ(all.buffers[0].start, 0);
  EXPECT_EQ(all.buffers[0].end, 1);
  EXPECT_THROW(to_problem(t, Window{2, 99}), InvalidInput);
}

TEST(TraceBadInput, MissingHeaderIsAnError) {
  EXPECT_THROW(parse(""), InvalidInput);
  try {
    parse("alloc,1,0x10,5\n");
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("t.csv:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("time_ns"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_trace("/nonexistent/trace.csv"), InvalidInput);
}

// A model, a pickle or any binary file is named as such, and its bytes are never echoed.
TEST(TraceBadInput, BinaryInputIsNamedAndNeverEchoed) {
  const std::string onnx = read_trace_bytes(std::string(MODELMEM_SOURCE_DIR) + "/models/tiny.onnx");
  for (const std::string& text : {onnx, std::string("\x80\x04\x95\x00\x00garbage\n", 14),
                                  std::string("ev\x01nt,time_ns\n")}) {
    try {
      parse(text);
      ADD_FAILURE() << "binary input accepted";
    } catch (const InvalidInput& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("not a trace: binary data"), std::string::npos) << msg;
      for (unsigned char c : msg) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c);
    }
  }
  // A text header that names no columns is echoed, made printable.
  try {
    parse("caf\xc3\xa9,x\n");
    ADD_FAILURE();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("caf\\xc3\\xa9"), std::string::npos) << e.what();
  }
}

ReadOptions skip_bad() {
  ReadOptions options;
  options.skip_bad = true;
  return options;
}

TEST(TraceBadInput, MalformedLinesAreSkippedWithTheirLineWhenAsked) {
  Trace t = parse(
      "event,time_ns,address,size,thread,label\n"
      "alloc,1,0x10,64,0,\n"
      "malloc,2,0x20,64,0,\n"
      "alloc,x,0x30,64,0,\n"
      "alloc,4,0xZZ,64,0,\n"
      "alloc,5,0x40,,0,\n"
      "alloc,6,0x50,0,0,\n"
      "free,7,0x10,64,0,\n"
      "alloc,8,0x60",
      skip_bad());
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.skipped_lines, 6u);
  EXPECT_TRUE(has_warning(t, "t.csv: skipped 6 malformed line(s)"));
  EXPECT_TRUE(has_warning(t, "t.csv:3: unknown event 'malloc'"));
  EXPECT_TRUE(has_warning(t, "t.csv:4: bad time_ns 'x'"));
  EXPECT_TRUE(has_warning(t, "t.csv:5: bad address '0xZZ'"));
  EXPECT_TRUE(has_warning(t, "t.csv:6: alloc event without size"));
  EXPECT_TRUE(has_warning(t, "t.csv:7: alloc of 0 bytes"));
  EXPECT_TRUE(has_warning(t, "t.csv:9: 3 fields where the header has 6 (truncated last line)"));
}

TEST(TraceBadInput, AMalformedLineIsAnErrorWithFileAndLineByDefault) {
  try {
    parse("event,time_ns,address,size\nalloc,1,0x10,64\nalloc,1,0x10,zz\n");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "t.csv:3: bad size 'zz' (--skip-bad skips malformed lines)");
  }
  EXPECT_THROW(parse("event,time_ns,address,size\nalloc,1,0x10\n"), InvalidInput);  // short
  EXPECT_THROW(parse("event,time_ns,address,size\nalloc,1,0x10,8\nalloc,2,0x"),
               InvalidInput);  // a truncated last line
}

TEST(TraceBadInput, ADirectoryIsNamed) {
  try {
    read_trace(std::filesystem::temp_directory_path());
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory, not a trace file"), std::string::npos)
        << e.what();
  }
}

TEST(TraceBadInput, ManyWarningsOfOneKindAreSummarised) {
  std::string text = "event,time_ns,address,size\n";
  for (int i = 0; i < 50; ++i) text += "bogus,1,0x1,1\n";
  Trace t = parse(text, skip_bad());
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(t.warnings.size(), 7u);  // 5 kept, one "and 45 more", one "skipped 50"
  EXPECT_TRUE(has_warning(t, "and 45 more: unknown event"));
}

TEST(TraceBadInput, OutOfOrderUnknownFreesAndLostFrees) {
  Trace t = parse(
      "event,time_ns,address,size\n"
      "alloc,10,0x10,64\n"
      "alloc,5,0x20,64\n"
      "free,11,0x99,64\n"
      "alloc,12,0x10,32\n"
      "free,13,0x10,32\n");
  EXPECT_EQ(t.events.size(), 5u);
  EXPECT_TRUE(has_warning(t, "t.csv:3: time goes backwards"));
  Blocks b = match_blocks(t);
  EXPECT_EQ(b.unknown_frees, 1u);
  EXPECT_EQ(b.first_unknown_free_line, 4u);
  EXPECT_EQ(b.reused_live_addresses, 1u);
  ASSERT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.blocks[0].free_index, 3u);  // closed by the second alloc at 0x10
  EXPECT_EQ(b.blocks[1].free_index, kNever);
  EXPECT_EQ(b.blocks[2].free_index, 4u);
  ASSERT_EQ(b.warnings.size(), 2u);
  EXPECT_NE(b.warnings[0].find("skipped 1 free(s)"), std::string::npos);
  EXPECT_NE(b.warnings[0].find("line 4"), std::string::npos);
}

}  // namespace
}  // namespace modelmem::trace
