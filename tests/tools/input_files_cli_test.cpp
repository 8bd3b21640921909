// Every reader of a file a user names refuses a FIFO and a character device (/dev/zero) with one
// line and exit status 2, at once: before, `config plan:/dev/zero` grew to 17 GB and a FIFO hung
// for ever. Each command runs under `timeout`, so a reader that blocks fails the test instead of
// hanging it.
#include <sys/stat.h>

#include "cli_test.hpp"

namespace {

class InputFilesCli : public CliTest {
 protected:
  // `modelmem ARGS` under a 20 s timeout; status 124 when it ran past it.
  CliRun run_bounded(const std::string& args) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "timeout 20 " + std::string(MODELMEM_CLI) + " " + args + " >" +
                            out.string() + " 2>" + err.string() + " </dev/null";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
};

TEST_F(InputFilesCli, EveryReaderRefusesAFifoAndDevZero) {
  const std::string model = std::string(MODELMEM_SOURCE_DIR) + "/models/tiny.onnx";
  // Each command with @ where the hostile path goes, and what the file is to that reader.
  const std::vector<std::pair<std::string, std::string>> readers{
      {"plan @", "an ONNX model file"},
      {"plan " + model + " --buckets n=1,2 --lengths @", "a request lengths file"},
      {"plan --serve @ --device-memory 1GiB", "an ONNX file"},
      {"solve @", "a CSV file"},
      {"analyze @", "a trace file"},
      {"replay @", "a trace file"},
      {"config strategy:static,plan:@", "a plan file"},
      {"place --models @ --devices 1x64GiB", "a YAML file"},
  };
  const std::string fifo = (dir_ / "hostile.pickle").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    const std::string what = path == fifo ? "a FIFO" : "a character device";
    for (const auto& [command, kind] : readers) {
      std::string args = command;
      args.replace(args.find('@'), 1, path);
      SCOPED_TRACE(args);
      const CliRun r = run_bounded(args);
      EXPECT_EQ(r.code, 2) << r.err;
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(r.err, "modelmem: error: " + path + ": is " + what + ", not " + kind + "\n");
    }
  }
}

// A plan whose buffers overlap while both live: `config` refuses it before it builds the pool.
TEST_F(InputFilesCli, ConfigRefusesAPlanThatBreaksItsPromise) {
  const auto plan = write("overlap.json", R"({"format": "modelmem-plan", "version": 1,
    "arena_bytes": 1536, "weights_bytes": 0, "buffers": [
    {"id": "a", "size": 1024, "alignment": 1, "start": 0, "end": 2, "offset": 0},
    {"id": "b", "size": 1024, "alignment": 1, "start": 1, "end": 3, "offset": 512}]})");
  const CliRun r = run_bounded("config strategy:static,plan:" + plan.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "modelmem: error: " + plan.string() +
                       ": plan file: buffers 'a' [0, 1024) and 'b' [512, 1536) overlap in address "
                       "while both live in [1, 2)\n");
}

}  // namespace
