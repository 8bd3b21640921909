// Runs `modelmem analyze / replay / trace / viz / config` as a user would: every config string
// that analyze advises on every shared trace (and the bundled example) is accepted by `config`
// and replays with no OOM; the numbers of a report add up; bad input is one line, exit code 2,
// and nothing else printed.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

class TraceCli : public CliTest {
 protected:
  CliRun run(const std::string& args) { return run_cli(args); }
};

std::string example_trace() {
  return std::string(MODELMEM_SOURCE_DIR) + "/examples/traces/torch_resnet50.events.csv";
}

// The bundled traces (examples/traces) and the shared ones, when present.
std::vector<std::string> every_trace() {
  std::vector<std::string> traces;
  for (fs::path folder : {fs::path(MODELMEM_SOURCE_DIR) / "examples" / "traces",
                          fs::path(MODELMEM_SHARED_DATA) / "traces"})
    if (fs::is_directory(folder))
      for (const auto& entry : fs::directory_iterator(folder))
        if (entry.path().string().ends_with(".events.csv")) traces.push_back(entry.path().string());
  std::sort(traces.begin(), traces.end());
  return traces;
}

TEST_F(TraceCli, EveryAdvisedStringIsAcceptedAndReplaysWithoutOom) {
  const auto traces = every_trace();
  if (traces.size() < 7) std::fprintf(stderr, "note: the shared traces are missing\n");
  std::size_t strings = 0;
  for (const std::string& t : traces) {
    SCOPED_TRACE(t);
    CliRun analysis = run("analyze --json " + t);
    ASSERT_EQ(analysis.code, 0) << analysis.err;
    CliRun text = run("analyze " + t);
    ASSERT_EQ(text.code, 0) << text.err;
    json j = json::parse(analysis.out);
    std::vector<std::string> advised;
    for (const json& adv : j["advice"])
      if (!adv["config"].is_null()) advised.push_back(adv["config"].get<std::string>());
    EXPECT_GE(advised.size(), 2u);  // a planned arena (or buckets) and a static pool
    bool planned = false;
    for (const std::string& config : advised) {
      SCOPED_TRACE(config);
      ++strings;
      planned = planned || config.starts_with("strategy:planned");
      // The text report prints the same string.
      EXPECT_NE(text.out.find("      config: " + config + "\n"), std::string::npos) << text.out;
      CliRun accepted = run("config " + quote(config));
      EXPECT_EQ(accepted.code, 0) << accepted.out << accepted.err;
      CliRun replayed =
          run("replay --strategy config --no-touch --json --config " + quote(config) + " " + t);
      ASSERT_EQ(replayed.code, 0) << replayed.err;
      json results = json::parse(replayed.out);
      ASSERT_EQ(results.size(), 1u);
      EXPECT_EQ(results[0]["strategy"], "config");
      EXPECT_EQ(results[0]["ooms"], 0);
    }
    EXPECT_TRUE(planned) << "no advice names strategy:planned";
  }
  EXPECT_GE(strings, 2u * traces.size());
}

TEST_F(TraceCli, TheNumbersOfAnAnalysisAddUp) {
  for (const std::string& t : every_trace()) {
    SCOPED_TRACE(t);
    CliRun r = run("analyze --json " + t);
    ASSERT_EQ(r.code, 0) << r.err;
    json j = json::parse(r.out);
    const json& s = j["summary"];
    const std::size_t allocs = s["allocs"];
    EXPECT_EQ(s["events"].get<std::size_t>(),
              allocs + s["frees"].get<std::size_t>() + s["marks"].get<std::size_t>() +
                  s["ooms"].get<std::size_t>() + s["device_events"].get<std::size_t>());
    std::size_t count = 0, bytes = 0;
    for (const json& bin : s["histogram"]) {
      count += bin["count"].get<std::size_t>();
      bytes += bin["bytes"].get<std::size_t>();
    }
    EXPECT_EQ(count, allocs);
    EXPECT_EQ(bytes, s["bytes_allocated"].get<std::size_t>());
    const double duration = s["duration_s"];
    EXPECT_NEAR(s["allocs_per_s"].get<double>() * duration, static_cast<double>(allocs),
                1e-6 * allocs);
    // The peak's time is inside the trace (relative to its first event).
    EXPECT_LE(s["peak_live_time_ns"].get<double>() * 1e-9, duration + 1e-9);
    for (const json& step : j["steps"]["list"]) {
      EXPECT_GE(step["peak_live"].get<std::size_t>(), step["live_in"].get<std::size_t>());
      EXPECT_LE(step["peak_live"].get<std::size_t>(), s["peak_live"].get<std::size_t>());
    }
    std::size_t steps_in_kinds = 0;
    for (const json& kind : j["step_kinds"]) {
      steps_in_kinds += kind["steps"].size();
      EXPECT_GE(kind["planned"].get<std::size_t>(), kind["lower_bound"].get<std::size_t>());
    }
    EXPECT_EQ(steps_in_kinds, j["steps"]["list"].size());
    // The static pool: the advised size is the replayed need plus 10 %, in MiB.
    const std::size_t pool = s["static_pool_bytes"];
    EXPECT_EQ(pool % (1 << 20), 0u);
    EXPECT_GE(pool, s["peak_live"].get<std::size_t>());
    for (const json& adv : j["advice"]) {
      if (adv["topic"] == "static-pool") {
        EXPECT_EQ(adv["config"], "strategy:static,static_pool_mb:" + std::to_string(pool >> 20));
      }
    }
  }
}

TEST_F(TraceCli, ReservedMemoryAddsUp) {
  // A caching allocator's view: 2 MiB segments; most blocks die, one at each end survives.
  std::string csv = "event,time_ns,address,size\n";
  std::uint64_t t = 5'000'000'000ull;
  auto line = [&](const char* event, std::uintptr_t address, std::size_t size) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s,%llu,0x%llx,%zu\n", event,
                  static_cast<unsigned long long>(t += 1000),
                  static_cast<unsigned long long>(address), size);
    csv += buf;
  };
  const std::size_t seg = 2u << 20, blk = 256u << 10;
  for (int s = 0; s < 6; ++s) {
    const std::uintptr_t base = 0x40000000 + static_cast<std::uintptr_t>(s) * 2 * seg;
    line("segment_alloc", base, seg);
    for (std::size_t k = 0; k < seg / blk; ++k) line("alloc", base + k * blk, blk);
    for (std::size_t k = 1; k + 1 < seg / blk; ++k) line("free", base + k * blk, blk);
  }
  fs::path trace = write("fragmented.csv", csv);
  CliRun r = run("analyze --json " + trace.string());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  const json& at = j["reserved_at_peak"];
  ASSERT_FALSE(at.is_null());
  const std::size_t reserved = at["reserved"], live = at["live"], unused = at["unused"];
  EXPECT_EQ(reserved, live + unused);
  EXPECT_EQ(unused, at["in_empty_ranges"].get<std::size_t>() + at["oversize"].get<std::size_t>() +
                        at["fragmented"].get<std::size_t>());
  EXPECT_EQ(j["summary"]["peak_reserved"].get<std::size_t>(), reserved);
  // The text says the same numbers: "peaks at R with L of it live at that moment and U unused".
  CliRun text = run("analyze " + trace.string());
  auto mib = [](std::size_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
    return std::string(buf);
  };
  EXPECT_NE(text.out.find("peaks at " + mib(reserved) + " with " + mib(live) +
                          " of it live at that moment and " + mib(unused) + " unused"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("(0.000 s from the first event)"), std::string::npos) << text.out;
}

TEST_F(TraceCli, ReplayNumbersAddUpAndAStrategyWithAConfigRunsBoth) {
  CliRun r = run("replay --no-touch --json --strategy static --config strategy:caching " +
                 example_trace());
  ASSERT_EQ(r.code, 0) << r.err;
  json results = json::parse(r.out);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["strategy"], "static");
  EXPECT_EQ(results[1]["strategy"], "config");
  for (const json& res : results) {
    EXPECT_EQ(res["ooms"], 0);
    EXPECT_NEAR(res["reserved_per_live"].get<double>(),
                res["peak_reserved"].get<double>() / res["peak_live"].get<double>(), 1e-9);
  }
  CliRun text =
      run("replay --no-touch --strategy static --config strategy:caching " + example_trace());
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("note: --strategy static and --config: both replayed"), std::string::npos)
      << text.out;
  // replay's static pool is the one analyze advises.
  json analysis = json::parse(run("analyze --json " + example_trace()).out);
  EXPECT_NE(results[0]["description"].get<std::string>().find(
                std::to_string(analysis["summary"]["static_pool_bytes"].get<std::size_t>() >> 20)),
            std::string::npos)
      << results[0]["description"];
}

TEST_F(TraceCli, BadInputIsOneLineWithExitCodeTwoAndNothingElse) {
  const std::string d = dir_.string();
  for (const std::string cmd : {"analyze", "replay", "viz"})
    expect_one_line_error(cmd + " " + d, d + ": is a directory, not a trace file");
  expect_one_line_error("trace " + d + " -o " + d + "/x.csv",
                        d + ": is a directory, not a trace file");
  expect_one_line_error("analyze " + d + "/missing.csv", "no such trace file");
  // A model given where a trace belongs: named, its bytes never echoed into the terminal.
  const std::string model = std::string(MODELMEM_SOURCE_DIR) + "/models/tiny.onnx";
  for (const std::string cmd : {"analyze", "replay", "viz"}) {
    expect_one_line_error(cmd + " " + model, "not a trace: binary data");
    CliRun r = run(cmd + " " + model);
    for (unsigned char c : r.err) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << int(c);
  }

  fs::path bad = write("bad.csv", "event,time_ns,address,size\nalloc,1,0x10,64\nalloc,2,0x20,xx\n");
  for (const std::string& cmd :
       std::vector<std::string>{"analyze", "replay", "viz -o " + d + "/x.html"})
    expect_one_line_error(cmd + " " + bad.string(),
                          bad.string() + ":3: bad size 'xx' (--skip-bad skips malformed lines)");
  CliRun skipped = run("analyze --skip-bad " + bad.string());
  EXPECT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_NE(skipped.out.find("skipped 1 malformed line(s)"), std::string::npos) << skipped.out;

  // Output files: an unknown extension, a missing folder, a directory: refused before reading.
  expect_one_line_error("trace " + example_trace() + " -o " + d + "/x.xyz",
                        "unknown output extension");
  EXPECT_FALSE(fs::exists(dir_ / "x.xyz"));
  expect_one_line_error("trace " + example_trace() + " -o " + d + "/no/x.csv", "does not exist");
  expect_one_line_error("viz " + example_trace() + " -o " + d + "/no/x.html", "does not exist");
  expect_one_line_error("viz " + example_trace() + " -o " + d + "/x.png", "name the file .html");
  expect_one_line_error("trace " + example_trace() + " -o " + d + "/x.csv --step 0",
                        "apply only to --format problem");
  expect_one_line_error(
      "trace " + example_trace() + " -o " + d + "/x.csv --format problem --step 9",
      "--step 9 but the trace has 4 steps (from marks), 0 to 3");
  EXPECT_FALSE(fs::exists(dir_ / "x.csv"));

  expect_one_line_error("replay --strategy config " + example_trace(),
                        "--strategy config needs --config");
  expect_one_line_error("replay --strategy nope " + example_trace(), "unknown strategy 'nope'");
  expect_one_line_error("replay --config strategy:static " + example_trace(), "static_pool_mb");
  // An absurd repeat count is refused with its range, not "internal error: std::bad_alloc".
  expect_one_line_error("replay --repeat 1000000000000 " + example_trace(),
                        "repeat 1000000000000 is out of range: from 1 to 10000 replays");
  expect_one_line_error("replay --repeat 10000 " + example_trace(), "at most ");
}

TEST_F(TraceCli, AnOutOfMemoryReplayExitsOne) {
  // A 1 MiB static pool cannot hold ResNet-50's blocks: the report is printed, the exit code is 1.
  CliRun r = run("replay --no-touch --strategy config --config strategy:static,static_pool_mb:1 " +
                 example_trace());
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("config"), std::string::npos) << r.out;
  CliRun fine = run("replay --no-touch --strategy caching " + example_trace());
  EXPECT_EQ(fine.code, 0) << fine.err;
}

TEST_F(TraceCli, ConvertsAndDrawsTheExample) {
  const std::string d = dir_.string();
  CliRun r = run("trace " + example_trace() + " -o " + d + "/x.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(perfetto, "), std::string::npos) << r.out;
  EXPECT_NO_THROW((void)json::parse(slurp(dir_ / "x.json")));
  r = run("trace " + example_trace() + " -o " + d + "/step.txt --format problem --step 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(problem, 268 buffers from events [539, 1075) of 2152)"), std::string::npos)
      << r.out;
  r = run("solve " + d + "/step.txt --solver best-fit");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("268 buffers, lower bound 11763840"), std::string::npos) << r.out;

  // Without marks, --step takes the steps `analyze` finds from the period (it said "0 marked
  // steps" where analyze listed 4).
  {
    std::ifstream in(example_trace());
    std::ofstream out(dir_ / "unmarked.csv");
    for (std::string line; std::getline(in, line);)
      if (!line.starts_with("mark,")) out << line << '\n';
  }
  r = run("analyze " + d + "/unmarked.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("steps (from the period): 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step   1: events [536, 1072)"), std::string::npos) << r.out;
  r = run("trace " + d + "/unmarked.csv -o " + d + "/period_step.txt --format problem --step 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(problem, 268 buffers from events [536, 1072) of 2144)"), std::string::npos)
      << r.out;
  EXPECT_EQ(slurp(dir_ / "period_step.txt"), slurp(dir_ / "step.txt"));
  expect_one_line_error("trace " + d + "/unmarked.csv -o " + d + "/y.csv --format problem --step 4",
                        "--step 4 but the trace has 4 steps (from the period), 0 to 3");

  r = run("viz " + example_trace() + " -o " + d + "/x.html");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(dir_ / "x.html").find("<!DOCTYPE html>"), std::string::npos);
}

}  // namespace
