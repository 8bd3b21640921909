// Runs the `modelmem solve` command as a user would and checks output, files and exit codes.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "modelmem/plan/plan_file.hpp"
#include "modelmem/plan/plan_io.hpp"

#include "cli_test.hpp"

namespace fs = std::filesystem;

namespace {

class SolveCli : public CliTest {
 protected:
  CliRun run(const std::string& args) { return run_command("solve " + args); }
  CliRun run_command(const std::string& args) { return run_cli(args); }
  static std::string example() { return std::string(MODELMEM_SOURCE_DIR) + "/examples/small.csv"; }
};

}  // namespace

TEST_F(SolveCli, AllSolversPrintOneTable) {
  CliRun r = run(example() + " --solver all");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 buffers, lower bound 26624"), std::string::npos) << r.out;
  for (const char* name : {"naive", "greedy-size", "greedy-breadth", "best-fit"})
    EXPECT_NE(r.out.find(std::string("\n") + name + " "), std::string::npos) << name << r.out;
  EXPECT_NE(r.out.find("proven"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress output when stderr is not a terminal
}

TEST_F(SolveCli, CapacityDecidesTheExitCode) {
  CliRun fits = run(example() + " --solver greedy-size --capacity 26624");
  EXPECT_EQ(fits.code, 0) << fits.out << fits.err;
  EXPECT_NE(fits.out.find("capacity 26624"), std::string::npos) << fits.out;
  CliRun below_bound = run(example() + " --solver greedy-size --capacity 26623");
  EXPECT_EQ(below_bound.code, 1) << below_bound.out;
  EXPECT_NE(below_bound.err.find("no plan found within the capacity"), std::string::npos);
  // Sizes as every size flag takes them: 26 KiB is 26624 bytes.
  CliRun in_kib = run(example() + " --solver greedy-size --capacity 26KiB");
  EXPECT_EQ(in_kib.code, 0) << in_kib.err;
  EXPECT_NE(in_kib.out.find("capacity 26624"), std::string::npos) << in_kib.out;
  CliRun naive = run(example() + " --solver naive --capacity 30000");
  EXPECT_EQ(naive.code, 1) << naive.out;
  EXPECT_NE(naive.out.find("exceeds capacity 30000"), std::string::npos) << naive.out;
}

TEST_F(SolveCli, WritesPlansAsCsvAndJson) {
  fs::path csv = dir_ / "plan.csv", json = dir_ / "plan.json";
  CliRun r = run(example() + " --solver all --output " + csv.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote the plan of"), std::string::npos);
  auto planned = modelmem::plan::read_plan_csv(csv);
  EXPECT_EQ(planned.problem.buffers.size(), 8u);
  EXPECT_TRUE(modelmem::plan::validate(planned.problem, planned.plan));
  EXPECT_EQ(planned.plan.arena_size, 26624u);  // the heuristics reach the lower bound here

  r = run(example() + " --solver best-fit -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(doc["format"], "modelmem-plan");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["solver"], "best-fit");
  EXPECT_EQ(doc["lower_bound_bytes"], 26624);
  EXPECT_EQ(doc["weights_bytes"], 0);
  EXPECT_EQ(doc["total_bytes"], doc["arena_bytes"]);
  ASSERT_EQ(doc["buffers"].size(), 8u);
  std::size_t arena = 0;
  for (const auto& b : doc["buffers"])
    arena = std::max(arena, b["offset"].get<std::size_t>() + b["size"].get<std::size_t>());
  EXPECT_EQ(doc["arena_bytes"], arena);
  EXPECT_NE(r.out.find("arena " + std::to_string(arena) + ", to"), std::string::npos) << r.out;
  EXPECT_EQ(doc["buffers"][0]["id"], "input");
  EXPECT_TRUE(doc["buffers"][0].contains("offset"));
  EXPECT_TRUE(doc["buffers"][0].contains("start"));
  EXPECT_TRUE(doc["buffers"][0].contains("end"));
  // The plan: config key reads the same file.
  modelmem::plan::PlanSizes sizes = modelmem::plan::read_plan_sizes(json.string());
  EXPECT_EQ(sizes.arena_bytes, arena);
  EXPECT_EQ(sizes.weights_bytes, 0u);
  CliRun accepted = run_command("config strategy:static,plan:" + json.string());
  EXPECT_EQ(accepted.code, 0) << accepted.out << accepted.err;
}

TEST_F(SolveCli, ADirectoryOrAnUnwritableOutputIsOneLineBeforeAnyOutput) {
  CliRun r = run(dir_.string() + " --solver naive");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "modelmem: error: " + dir_.string() + ": is a directory, not a problem file\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = run(example() + " --solver naive -o " + dir_.string() + "/no/such/plan.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // the table is not printed before the error
}

TEST_F(SolveCli, BadInputIsOneLineAndExitCodeTwo) {
  fs::path bad = write("bad.csv", "id,lower,upper,size\na,0,4,16\nb,3,2,8\n");
  CliRun r = run(bad.string() + " --solver naive");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "modelmem: error: " + bad.string() + ":3: upper 2 is not after lower 3 (buffer 'b')\n");

  fs::path binary = write("binary.csv", std::string("\x7f"
                                                    "ELF\x00\x01",
                                                    6));
  r = run(binary.string() + " --solver naive");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(binary.string() + ":1: not a CSV text file"), std::string::npos) << r.err;

  fs::path empty = write("empty.csv", "");
  r = run(empty.string() + " --solver naive");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(empty.string() + ": empty file"), std::string::npos) << r.err;
}

TEST_F(SolveCli, UsageErrorsExitWithTwo) {
  EXPECT_EQ(run(example() + " --solver nope").code, 2);
  EXPECT_EQ(run(example() + " --solver naive --capacity 12k").code, 2);  // kB or KiB?
  EXPECT_EQ(run(example() + " --solver naive --capacity 0").code, 2);
  EXPECT_EQ(run(example() + " --solver naive --time-limit 0").code, 2);
  EXPECT_EQ(run(example() + " --solver naive --output plan.txt").code, 2);
  EXPECT_EQ(run("/nonexistent.csv --solver naive").code, 2);
  EXPECT_EQ(run("").code, 2);  // the file argument is required
}

TEST_F(SolveCli, ThreadsOptionAndTheProvenLowerBoundLine) {
  EXPECT_EQ(run(example() + " --solver naive --threads 0").code, 2);
  EXPECT_EQ(run(example() + " --solver naive --threads two").code, 2);
  CliRun r = run(example() + " --solver best --threads 2");
  EXPECT_EQ(r.code, 0) << r.err;
  // Both bounds, the best arena and the gap, always.
  EXPECT_NE(r.out.find("lower bounds: peak-live 26624, proven 26624; best arena 26624: optimal"),
            std::string::npos)
      << r.out;

  // Two 3 KiB buffers aligned to 4 KiB and live together need 7 KiB, above the 6 KiB peak.
  fs::path aligned =
      write("aligned.csv", "id,lower,upper,size,alignment\na,0,2,3072,4096\nb,1,3,3072,4096\n");
  r = run(aligned.string() + " --solver exact");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("lower bounds: peak-live 6144, proven 7168 (1.1667 x peak-live); best "
                       "arena 7168: optimal"),
            std::string::npos)
      << r.out;
  r = run(aligned.string() + " --solver naive");
  EXPECT_NE(r.out.find("lower bounds: peak-live 6144, proven 6144; best arena 7168, gap 1024 "
                       "bytes (14.29% of the arena)"),
            std::string::npos)
      << r.out;
}

TEST_F(SolveCli, JsonReportHasBothBoundsAndTheGap) {
  fs::path aligned =
      write("aligned.csv", "id,lower,upper,size,alignment\na,0,2,3072,4096\nb,1,3,3072,4096\n");
  CliRun r = run(aligned.string() + " --solver all --json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"file\": ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"peak_live_bound\": 6144, \"proven_lower_bound\": 7168"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"arena\": 7168, \"gap\": 0.000000, \"optimal\": true}"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("{\"name\": \"naive\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("solver "), std::string::npos) << r.out;  // no table
  // The time spent reading and writing, which the time limit does not cover (nothing written).
  EXPECT_NE(r.out.find(", \"read_seconds\": 0.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", \"write_seconds\": 0.000,"), std::string::npos) << r.out;
  fs::path plan = dir_ / "aligned.plan.json";
  CliRun w = run(aligned.string() + " --json -o " + plan.string());
  EXPECT_EQ(w.code, 0) << w.err;
  EXPECT_TRUE(fs::exists(plan));
  EXPECT_NE(w.out.find(", \"write_seconds\": 0.0"), std::string::npos) << w.out;
}

// MindSpore's files start tensors at -1; IREE's carry the compiler's own offsets, a valid plan
// that seeds the searches.
TEST_F(SolveCli, NegativeTimesAndAnOffsetColumn) {
  fs::path neg = write("neg.csv", "id,lower,upper,size\na,-1,3,4\nb,0,2,8\nc,-5,-1,2\n");
  CliRun r = run(neg.string() + " --solver best");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("best arena 12: optimal"), std::string::npos) << r.out;
  fs::path offs = write("offs.csv", "id,lower,upper,size,offset\na,0,2,4,8\nb,1,3,8,0\n");
  r = run(offs.string() + " --solver best");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("the file's offset column: a plan of arena 12 (the searches start from it)"),
            std::string::npos)
      << r.out;
  fs::path bad = write("bad.csv", "id,lower,upper,size,offset\na,0,2,4,0\nb,1,3,8,0\n");
  r = run(bad.string() + " --solver best");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("the file's offset column: not a valid plan"), std::string::npos) << r.out;
}
