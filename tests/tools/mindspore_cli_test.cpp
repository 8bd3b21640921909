// MindSpore's memory tracker file (memory_block.csv, written here in its layout) through
// `modelmem analyze / replay / viz / trace / solve` as a MindSpore user would run them: the
// set_memory values analyze advises replay with no OOM at their size and fail a MiB below, and
// malformed files are one line naming the file, the line and the column.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "../support/mindspore_tracker.hpp"
#include "cli_test.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class MindSporeCli : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    file_ = write("memory_block.csv", modelmem::test::example_run(6).text()).string();
  }
  // The OOMs of the tracker's blocks replayed through `config` (exit 1 with OOMs, 0 without).
  long ooms(const std::string& config) {
    CliRun r =
        run_cli("replay --no-touch --json --strategy config --config " + config + " " + file_);
    EXPECT_TRUE(r.code == 0 || r.code == 1) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(r.code, j[0]["ooms"].get<long>() > 0 ? 1 : 0);
    return j[0]["ooms"].get<long>();
  }
  std::string file_;
};

// "1.25GB" -> whole MiB (MindSpore's GB is 2^30 bytes).
std::size_t mib_of(const std::string& gb) {
  return static_cast<std::size_t>(std::stod(gb) * 1024.0 + 0.5);
}

TEST_F(MindSporeCli, AnalyzeAdvisesSetMemoryThatReplaysAtItsSizeAndFailsBelow) {
  CliRun r = run_cli("analyze --json " + file_);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["summary"]["peak_live"], 18u << 20);
  const json* pool = nullptr;
  for (const json& adv : j["advice"])
    if (adv["topic"] == "static-pool") pool = &adv;
  ASSERT_NE(pool, nullptr) << r.out;
  const std::string call = (*pool)["mindspore"].get<std::string>();
  std::smatch m;
  ASSERT_TRUE(
      std::regex_match(call, m,
                       std::regex(R"(mindspore\.runtime\.set_memory\(init_size="([0-9.]+)GB", )"
                                  R"(increase_size="([0-9.]+)GB", max_size="([0-9.]+)GB"\))")))
      << call;
  const std::size_t init = mib_of(m[1]), increase = mib_of(m[2]), max = mib_of(m[3]);
  EXPECT_EQ(init + increase, max);
  // The config string beside it is the same pool of max_size.
  EXPECT_EQ((*pool)["config"], "strategy:static,static_pool_mb:" + std::to_string(max));
  EXPECT_GE(max, init + init / 10);  // need + the 10% margin, rounded up to MiB
  // At init_size (the need) and at max_size no OOM; a MiB below the need, OOMs.
  EXPECT_EQ(ooms("strategy:static,static_pool_mb:" + std::to_string(max)), 0);
  EXPECT_EQ(ooms("strategy:static,static_pool_mb:" + std::to_string(init)), 0);
  EXPECT_GT(ooms("strategy:static,static_pool_mb:" + std::to_string(init - 1)), 0);
  // The text report shows it next to the config string, and says what it is.
  CliRun text = run_cli("analyze " + file_);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("      MindSpore: " + call), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("init_size = that need (" + std::to_string(init) +
                          " MiB), max_size = "
                          "the need + the 10% margin (" +
                          std::to_string(max) + " MiB)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("MindSpore's pool itself was not run here"), std::string::npos);
  EXPECT_NE(text.out.find("one tick is shown as 1 us"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 rows placed inside a SOMAS block"), std::string::npos) << text.out;
  // The steps repeat: the planned arena is advised too, and the sites are the nodes.
  EXPECT_NE(text.out.find("Repeating step"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Default/network/Gelu-op2"), std::string::npos) << text.out;
}

// docs/ascend.md analyzes examples/ascend/memory_block.csv: it is this writer's run, made up here.
TEST_F(MindSporeCli, TheExampleFileIsTheSimulatedRun) {
  EXPECT_EQ(slurp(fs::path(MODELMEM_SOURCE_DIR) / "examples" / "ascend" / "memory_block.csv"),
            modelmem::test::example_run(6).text());
}

TEST_F(MindSporeCli, ReplayVizTraceAndSolveTakeTheFile) {
  const std::string d = dir_.string();
  CliRun r = run_cli("replay --no-touch " + file_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("events, peak live 18.00 MiB"), std::string::npos) << r.out;
  r = run_cli("viz " + file_ + " -o " + d + "/m.html");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(dir_ / "m.html").find("Default/network/MatMul-op1"), std::string::npos);
  // As a planning problem: solve reads it directly, and `trace --format problem` writes one.
  r = run_cli("solve " + file_ + " --solver best-fit");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("27 buffers, lower bound 18874368"), std::string::npos) << r.out;
  r = run_cli("trace " + file_ + " -o " + d + "/all.csv --format problem --window 0:51");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("solve " + d + "/all.csv --solver best-fit");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("lower bound 18874368"), std::string::npos) << r.out;
  // The older layout (MindSpore 2.3-2.4) reads the same.
  fs::path old = write("old.csv", modelmem::test::example_run(6, false).text());
  r = run_cli("solve " + old.string() + " --solver best-fit");
  EXPECT_NE(r.out.find("27 buffers, lower bound 18874368"), std::string::npos) << r.out;
}

TEST_F(MindSporeCli, MalformedFilesAreOneLineNamingFileLineAndColumn) {
  std::string text = modelmem::test::example_run(2).text();
  // Line 4 (the third block): its size becomes "4M".
  std::size_t pos = 0;
  for (int n = 0; n < 3; ++n) pos = text.find('\n', pos) + 1;
  const std::size_t size_at = text.find(",4194304,", pos) + 1;
  fs::path bad = write("bad.csv", text.substr(0, size_at) + "4M" + text.substr(size_at + 7));
  for (const std::string cmd : {"analyze", "replay", "solve"})
    expect_one_line_error(cmd + " " + bad.string(),
                          bad.string() +
                              ":4: column 'size': '4M' is not a non-negative whole "
                              "number");
  CliRun skipped = run_cli("analyze --skip-bad " + bad.string());
  EXPECT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_NE(skipped.out.find(bad.string() + ":4: column 'size'"), std::string::npos) << skipped.out;
  fs::path backwards =
      write("back.csv", std::string(modelmem::test::kTrackerHeaderOld) +
                            "\n9,5,0x10,0,Ascend,512,0,a.cc,1,Other,1,K,N,G,{},\n");
  for (const std::string& cmd :
       std::vector<std::string>{"analyze", "viz -o " + dir_.string() + "/x.html", "solve"})
    expect_one_line_error(
        cmd + " " + backwards.string(),
        backwards.string() + ":2: column 'end_time_stamp': 5 is not after start_time_stamp 9");
}

}  // namespace
