#include "modelmem/trace/snapshot.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/pickle.hpp"
#include "modelmem/trace/viz.hpp"

namespace modelmem::trace {
namespace {

using alloc::EventKind;
namespace fs = std::filesystem;
using namespace std::string_literals;

constexpr std::size_t MiB = std::size_t{1} << 20;

// The snapshots tests/trace/make_snapshots.py writes (Python's pickle module, no torch).
const fs::path& data_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::path(MODELMEM_BINARY_DIR) / "snapshot_test_data";
    std::string cmd =
        MODELMEM_PYTHON " " MODELMEM_SOURCE_DIR "/tests/trace/make_snapshots.py " + d.string();
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
    return d;
  }();
  return dir;
}

std::string file(const std::string& name) {
  return (data_dir() / name).string();
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Pickle, ReadsEveryValueKindInProtocols3And5) {
  for (const char* name : {"values_p3.pickle", "values_p5.pickle"}) {
    SCOPED_TRACE(name);
    pickle::Document d = pickle::parse(bytes_of(file(name)), name);
    auto get = [&](const char* k) {
      const pickle::Node* n = d.get(d.root, k);
      EXPECT_NE(n, nullptr) << k;
      return n;
    };
    EXPECT_EQ(get("none")->kind, pickle::Kind::kNone);
    EXPECT_EQ(get("t")->i, 1);
    EXPECT_EQ(get("f")->i, 0);
    EXPECT_EQ(pickle::as_int(*get("small")), 7);
    EXPECT_EQ(pickle::as_int(*get("neg")), -300);
    EXPECT_EQ(pickle::as_int(*get("i32")), -(std::int64_t{1} << 31));
    EXPECT_EQ(pickle::as_int(*get("big")), (std::int64_t{1} << 40) + 5);
    EXPECT_EQ(pickle::as_uint(*get("u64")), ~std::uint64_t{0});
    EXPECT_FALSE(pickle::as_int(*get("u64")).has_value());
    EXPECT_DOUBLE_EQ(get("float")->f, 1.5);
    EXPECT_EQ(get("str")->s, "h\xc3\xa9llo");
    EXPECT_EQ(get("bytes")->kind, pickle::Kind::kBytes);
    EXPECT_EQ(get("bytes")->s, std::string("\x00\x01", 2));
    EXPECT_EQ(get("list")->items.size(), 2u);
    EXPECT_EQ(get("tuple")->items.size(), 4u);
    EXPECT_EQ(get("t1")->items.size(), 1u);
    EXPECT_EQ(get("t2")->items.size(), 2u);
    EXPECT_EQ(get("t3")->items.size(), 3u);
    EXPECT_EQ(get("empty")->kind, pickle::Kind::kTuple);
    const pickle::Node* alias = get("alias");
    ASSERT_EQ(alias->items.size(), 2u);
    EXPECT_EQ(alias->items[0], alias->items[1]);  // the memo: one shared list
  }
}

TEST(Pickle, RefusesCodeWithTheByteOffsetAndRunsNothing) {
  std::string message = error_of([] { read_trace(file("evil.pickle")); });
  EXPECT_NE(message.find("pickle byte 64: opcode STACK_GLOBAL refused"), std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(data_dir() / "pwned"));
  // Protocol 2 spells a global with GLOBAL; REDUCE and BUILD alone are refused too.
  std::string global = std::string("\x80\x02", 2) + "cos\nsystem\n.";
  EXPECT_NE(error_of([&] { pickle::parse(global, "g"); }).find("g: pickle byte 2: opcode GLOBAL"),
            std::string::npos);
  std::string reduce = std::string("\x80\x04", 2) + "NNR.";
  EXPECT_NE(error_of([&] { pickle::parse(reduce, "r"); }).find("byte 4: opcode REDUCE"),
            std::string::npos);
  std::string build = std::string("\x80\x04", 2) + "}Nb.";
  EXPECT_NE(error_of([&] { pickle::parse(build, "b"); }).find("opcode BUILD"), std::string::npos);
}

TEST(Pickle, MalformedInputsAreOneLineErrors) {
  const std::string p4("\x80\x04", 2);
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty file"},
      {std::string("\x80\x01", 2) + "N.", "protocol 1"},
      {p4 + "N", "ends without STOP"},
      {p4 + "NN.", "STOP with 2 values"},
      {p4 + ".", "STOP with 0 values"},
      {p4 + "X\xff\xff\xff\x7f", "truncated"},
      {p4 + "h\x05.", "memo entry 5 not defined"},
      {p4 + "NNa.", "APPEND on a None"},
      {p4 + "Na.", "stack underflow"},
      {p4 + "}(N.", "STOP with"},
      {p4 + "}(Nu.", "odd number"},
      {p4 + "1.", "no MARK"},
      {p4 + "\x8a\x0a\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a.", "does not fit in 64 bits"},
      {p4 + "\xff", "unknown opcode 0xff"},
      {p4 + "\x8f.", "EMPTY_SET is not part"},
  };
  for (const auto& [input, needle] : cases) {
    std::string m = error_of([&] { pickle::parse(input, "x.pickle"); });
    EXPECT_NE(m.find(needle), std::string::npos) << "input size " << input.size() << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
    EXPECT_TRUE(m.starts_with("x.pickle: ")) << m;
  }
}

TEST(Pickle, SharedReferencesCannotInflateTheConversion) {
  // device_traces: 2000 references (2 bytes each) to one list of 2000 valid entries: 4 million
  // entries to convert from 60 KB if followed.
  std::string p = std::string("\x80\x04", 2) +
                  "}(\x8c\x0d"
                  "device_traces"
                  "](]q\x00("s;
  for (int i = 0; i < 2000; ++i)
    p += "}(\x8c\x06"
         "action\x8c\x03"
         "oom\x8c\x04"
         "sizeK\x01u";
  p += "e";
  for (int i = 0; i < 1999; ++i) p += "h\x00"s;
  p += "eu.";
  std::string m = error_of([&] { parse_snapshot(p, "bomb.pickle"); });
  EXPECT_NE(m.find("more entries than the file can hold"), std::string::npos) << m;
}

TEST(Snapshot, ConvertsTheDocumentedLayoutInEveryProtocol) {
  for (int p = 2; p <= 5; ++p) {
    SCOPED_TRACE(p);
    Trace t = read_trace(file("cuda_p" + std::to_string(p) + ".pickle"));
    // 1 segment and 2 blocks from before the history, then 26 recorded events (free_completed
    // after its free_requested folded away).
    std::size_t allocs = 0, frees = 0, segs = 0, ooms = 0, marks = 0;
    for (const auto& e : t.events) {
      allocs += e.kind == EventKind::kAlloc;
      frees += e.kind == EventKind::kFree;
      segs += e.kind == EventKind::kSegmentAlloc;
      ooms += e.kind == EventKind::kOom;
      marks += e.kind == EventKind::kMark;
    }
    EXPECT_EQ(allocs, 2u + 6u + 1u);
    EXPECT_EQ(frees, 7u);
    EXPECT_EQ(segs, 2u);
    EXPECT_EQ(ooms, 1u);
    EXPECT_EQ(marks, 1u);
    EXPECT_EQ(t.events.front().kind, EventKind::kSegmentAlloc);
    EXPECT_EQ(t.events.front().size, 20 * MiB);
    EXPECT_EQ(t.events.front().time_ns, 100'000u);
    ASSERT_FALSE(t.warnings.empty());
    EXPECT_NE(t.warnings[0].find("1 segment(s) and 2 live block(s) existed before"),
              std::string::npos)
        << t.warnings[0];

    Analysis a = analyze(t);
    EXPECT_EQ(a.peak_live, 13 * MiB);
    ASSERT_TRUE(a.peak_reserved.has_value());
    EXPECT_EQ(*a.peak_reserved, 22 * MiB);
    EXPECT_EQ(a.ooms, 1u);
    EXPECT_EQ(a.never_freed, 2u);  // the weights block and the last 512 KiB

    auto sites = allocation_sites(t);
    ASSERT_GE(sites.size(), 3u);
    EXPECT_EQ(sites[0].site, "model.py:13 forward");  // innermost frame outside torch
    EXPECT_EQ(sites[0].bytes, 24 * MiB);
    EXPECT_EQ(sites[0].allocs, 3u);
    EXPECT_EQ(sites[1].site, "model.py:12 forward");  // relu in torch/ skipped
    EXPECT_NE(sites_text(sites).find("model.py:13 forward"), std::string::npos);
    bool weights = false;
    for (const auto& s : sites)
      weights = weights || (s.site == "load.py:3 load_weights" && s.live_at_end == MiB);
    EXPECT_TRUE(weights);
  }
}

TEST(Snapshot, TorchNpuWithoutTimesIsKeptInOrderWithAWarning) {
  Trace t = read_trace(file("npu.pickle"));
  bool warned = false;
  for (const auto& w : t.warnings)
    warned = warned || w.find("without time_us") != std::string::npos;
  EXPECT_TRUE(warned);
  for (std::size_t i = 1; i < t.events.size(); ++i)
    EXPECT_LE(t.events[i - 1].time_ns, t.events[i].time_ns);
  EXPECT_EQ(t.events.back().kind, EventKind::kMark);
  EXPECT_EQ(t.events.back().label, "workspace_snapshot");
  EXPECT_EQ(analyze(t).peak_live, 13 * MiB);
}

TEST(Snapshot, SegmentsAloneGiveTheStateAtTheSnapshot) {
  Trace t = read_trace(file("segments_only.pickle"));
  Analysis a = analyze(t);
  EXPECT_EQ(a.peak_live, MiB + 512 * 1024);
  EXPECT_EQ(a.peak_reserved.value_or(0), 22 * MiB);
  EXPECT_EQ(t.events[3].address, 0x7F0002000000u);  // address from the segment's start
}

// A snapshot whose history cannot be true is read, each inconsistency counted and named in the
// analysis notes (as the CSV reader names what it skipped), none crashing or skewing a figure.
TEST(Snapshot, InconsistentHistoriesAreCountedAndNamed) {
  Trace t = read_trace(file("hostile.pickle"));
  auto note = [&](const std::string& part) {
    for (const auto& w : t.warnings)
      if (w.find(part) != std::string::npos) return w;
    return std::string();
  };
  EXPECT_NE(note("1 double free(s) (first device_traces[0][3]: 0x7f0002000000): dropped"), "")
      << ::testing::PrintToString(t.warnings);
  EXPECT_NE(note("1 block(s) overlapping a live block (first device_traces[0][5]: 0x7f0002100000 "
                 "+ 1048576 B over the live block 0x7f0002000000 + 4194304 B)"),
            "")
      << ::testing::PrintToString(t.warnings);
  EXPECT_NE(note("1 address(es) whose range wraps past 2^64 (first device_traces[0][6]: "
                 "0xfffffffffffff000 + 8192 B): dropped"),
            "")
      << ::testing::PrintToString(t.warnings);
  EXPECT_NE(note("1 event(s) out of time order (first device_traces[0][8] at 145 us, after 155 "
                 "us): sorted by time"),
            "")
      << ::testing::PrintToString(t.warnings);
  for (const auto& e : t.events) EXPECT_LT(e.address, 0xfffffffffffff000u);
  Analysis a = analyze(t);
  EXPECT_EQ(a.peak_live, 7 * MiB);  // 4 + 1 + 2 MiB: the dropped block and free count nothing
  bool in_notes = false;
  for (const auto& s : a.skipped) in_notes = in_notes || s.find("double free") != std::string::npos;
  EXPECT_TRUE(in_notes);

  Trace same = read_trace(file("same_time.pickle"));
  bool warned = false;
  for (const auto& w : same.warnings)
    warned =
        warned ||
        w.find("6000 of 6000 events share one time (5 us): rates and durations are not real") !=
            std::string::npos;
  EXPECT_TRUE(warned) << ::testing::PrintToString(same.warnings);
  EXPECT_EQ(analyze(same).peak_live, MiB);
}

TEST(Snapshot, WrongLayoutsAndFilesAreRefusedByName) {
  EXPECT_NE(error_of([] {
              read_trace(file("not_snapshot.pickle"));
            }).find("not_snapshot.pickle: top level: a dict without 'segments'"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_trace(file("truncated.pickle")); }).find("truncated"),
            std::string::npos);
  fs::path fake = data_dir() / "text.pickle";
  std::ofstream(fake) << "event,time_ns\n";
  EXPECT_NE(error_of([&] { read_trace(fake); }).find("not a pickle of protocol 2-5"),
            std::string::npos);
  const std::string p4("\x80\x04", 2);
  // An entry with a negative size; an unknown action under strict.
  std::string neg = p4 +
                    "}(\x8c\x0d"
                    "device_traces"
                    "](](}(\x8c\x06"
                    "action\x8c\x05"
                    "alloc"
                    "\x8c\x04"
                    "addr"
                    "K\x01"
                    "\x8c\x04"
                    "size"
                    "J\xff\xff\xff\xffueeu.";
  EXPECT_NE(error_of([&] {
              parse_snapshot(neg, "n");
            }).find("n: device_traces[0][0]: 'size' is a int below 0"),
            std::string::npos)
      << error_of([&] { parse_snapshot(neg, "n"); });
  std::string odd = p4 +
                    "}(\x8c\x0d"
                    "device_traces"
                    "](](}(\x8c\x06"
                    "action\x8c\x04"
                    "junkueeu.";
  ReadOptions skip_bad;
  skip_bad.skip_bad = true;
  EXPECT_EQ(parse_snapshot(odd, "o", skip_bad).warnings.back(),
            "o: skipped 1 entry of unknown action 'junk'");
  // By default, as a malformed trace line, it stops the reading.
  EXPECT_NE(error_of([&] { parse_snapshot(odd, "o"); }).find("unknown action 'junk'"),
            std::string::npos);
  // The action is the file's text: a newline or other byte in it cannot break the one-line
  // error or warning (found by fuzz_snapshot).
  std::string broken = p4 +
                       "}(\x8c\x0d"
                       "device_traces"
                       "](](}(\x8c\x06"
                       "action\x8c\x04"
                       "sn\n\x7f"
                       "ueeu.";
  const std::string message = error_of([&] { parse_snapshot(broken, "b"); });
  EXPECT_NE(message.find("unknown action 'sn\\x0a\\x7f'"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(parse_snapshot(broken, "b", skip_bad).warnings.back(),
            "b: skipped 1 entry of unknown action 'sn\\x0a\\x7f'");
}

TEST(Snapshot, VizShowsTheSiteOnHoverAndCsvKeepsIt) {
  Trace t = read_trace(file("cuda_p4.pickle"));
  std::ostringstream html;
  write_viz_html(t, html);
  EXPECT_NE(html.str().find("model.py:13 forward"), std::string::npos);
  std::stringstream csv;
  write_csv(t, csv);
  Trace back = parse_trace(csv, "back.csv");
  ASSERT_EQ(back.events.size(), t.events.size());
  EXPECT_EQ(allocation_sites(back)[0].site, "model.py:13 forward");
}

}  // namespace
}  // namespace modelmem::trace
