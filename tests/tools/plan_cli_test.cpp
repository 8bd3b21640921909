// Runs `modelmem plan` (and the tool's command-line handling) as a user would: the report's
// figures, several models sharing a device, and every bad input: exit code 2, one line on
// stderr, nothing on stdout.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_test.hpp"
#include "modelmem/core/bytes.hpp"

namespace fs = std::filesystem;

namespace {

class PlanCli : public CliTest {
 protected:
  // `modelmem ARGS`, stdout and stderr apart.
  CliRun tool(const std::string& args) { return run_cli(args, /*no_stdin=*/true); }
  // A bad input: exit 2, one line on stderr containing `expect`, nothing on stdout.
  void expect_rejected(const std::string& args, const std::string& expect) {
    SCOPED_TRACE(args);
    CliRun r = tool(args);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_LT(r.err.size(), 400u) << r.err;
  }
  static std::string model(const std::string& name) {
    return std::string(MODELMEM_SOURCE_DIR) + "/models/" + name;
  }
  static std::size_t field(const std::string& text, const std::string& label) {
    // "LABEL   1,234 B (...)" -> 1234
    auto p = text.find("\n" + label);
    if (p == std::string::npos) p = text.rfind(label, 0) == 0 ? 0 : std::string::npos;
    EXPECT_NE(p, std::string::npos) << label << " not in\n" << text;
    if (p == std::string::npos) return 0;
    p = text.find_first_of("0123456789", p + label.size() + 1);
    std::string digits;
    for (; p < text.size() && (std::isdigit(static_cast<unsigned char>(text[p])) || text[p] == ',');
         ++p)
      if (text[p] != ',') digits += text[p];
    return std::stoull(digits);
  }
};

// The seed preset is compared with the need the report prints above it, not with another figure;
// --safety prints the quota, the need x F.
TEST_F(PlanCli, TheSeedPresetIsComparedWithTheNeedLine) {
  CliRun r = tool("plan " + model("resnet50.onnx") + " --dim batch=1 --safety 1.2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::size_t need = field(r.out, "need ");
  const std::string seed = r.out.substr(r.out.find("seed preset"));
  const std::size_t provisioned = field(seed.substr(seed.find(" = ")), " =");
  ASSERT_GT(need, 0u);
  const std::size_t x = seed.find("x the need above, " + modelmem::format_bytes(need) + ")");
  ASSERT_NE(x, std::string::npos) << seed;
  const std::size_t open = seed.rfind('(', x);
  EXPECT_NEAR(std::stod(seed.substr(open + 1, x - open - 1)),
              static_cast<double>(provisioned) / static_cast<double>(need), 0.05)
      << seed;
}

TEST_F(PlanCli, TinyReportsIdealEagerAndTotal) {
  // tiny.onnx (models/make_models.py): the in-place reuse of the static runtime halves the
  // eager peak; the total is weights + arena.
  CliRun r = tool("plan " + model("tiny.onnx") + " --dim n=1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::size_t weights = field(r.out, "weights"), arena = field(r.out, "planned arena");
  EXPECT_EQ(weights, 106512u);
  EXPECT_EQ(arena, 1024u);
  EXPECT_EQ(field(r.out, "ideal arena"), arena);
  EXPECT_EQ(field(r.out, "total"), weights + arena);
  EXPECT_GT(field(r.out, "eager peak"), arena);
  EXPECT_NE(r.out.find("(float32 as stored)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PyTorch eager"), std::string::npos) << r.out;

  CliRun e = tool("plan " + model("tiny.onnx") + " --dim n=1 --runtime eager");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(field(e.out, "eager peak"), field(r.out, "eager peak"));
  EXPECT_EQ(field(e.out, "ideal arena"), arena);
  EXPECT_GE(field(e.out, "planned arena"), field(e.out, "eager peak"));
  EXPECT_EQ(field(e.out, "total"), weights + field(e.out, "planned arena"));
}

TEST_F(PlanCli, DtypeAppliesToWeightsAndLabels) {
  CliRun r = tool("plan " + model("resnet50.onnx") + " --dim batch=1");
  CliRun h = tool("plan " + model("resnet50.onnx") + " --dim batch=1 --dtype fp16");
  CliRun k =
      tool("plan " + model("resnet50.onnx") + " --dim batch=1 --dtype fp16 --keep-weights-dtype");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(h.code, 0) << h.err;
  ASSERT_EQ(k.code, 0) << k.err;
  EXPECT_EQ(field(h.out, "weights"), field(r.out, "weights") / 2);
  EXPECT_EQ(field(k.out, "weights"), field(r.out, "weights"));
  EXPECT_NE(h.out.find("float32 planned as float16"), std::string::npos) << h.out;
  EXPECT_EQ(h.out.find("as stored"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("Conv_output_0 float16 [1x64x112x112]: 1,605,632 B"), std::string::npos)
      << h.out;
  EXPECT_EQ(field(h.out, "total"), field(h.out, "weights") + field(h.out, "planned arena"));
}

TEST_F(PlanCli, JsonCarriesBothFigures) {
  fs::path json = dir_ / "plan.json";
  CliRun r = tool("plan " + model("tiny.onnx") + " --dim n=1 -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["arena_bytes"], 1024u);
  EXPECT_EQ(j["ideal_arena_bytes"], 1024u);
  EXPECT_EQ(j["eager_peak_bytes"].get<std::size_t>(), field(r.out, "eager peak"));
  EXPECT_EQ(j["total_bytes"], 106512u + 1024u);
  EXPECT_EQ(j["runtime"], "static");
}

TEST_F(PlanCli, LongAliasChainsAreShortened) {
  CliRun r =
      tool("plan " + model("bert_base.onnx") + " --dim batch=1 --dim seq=128 --show-live 50");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::size_t longest = 0;
  while (std::getline(lines, line)) longest = std::max(longest, line.size());
  EXPECT_LT(longest, 400u) << r.out;
  EXPECT_NE(r.out.find(" = ... = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tensors)"), std::string::npos) << r.out;
}

TEST_F(PlanCli, ModelsSharingADevice) {
  const std::string both = model("tiny.onnx") + " " + model("resnet50.onnx");
  CliRun r =
      tool("plan " + both +
           " --dim n=1 --dim batch=1 --device-memory 1GiB --overhead 64MiB --runtime static");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("fit            yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runtime        static: the models run under a static executor"),
            std::string::npos)
      << r.out;
  // tiny's 105 KiB take one 2 MiB segment of the caching pool that serves it (a static
  // executor's sequence; PyTorch's, the default with --device-memory, is below).
  EXPECT_NE(r.out.find("config         tiny: pools:[tiny:2],default_pool:tiny"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("config         resnet50: pools:[resnet50:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("every model: pools:[tiny:2,resnet50:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("overhead       64.00 MiB: --overhead 64MiB"), std::string::npos) << r.out;
  CliRun eager =
      tool("plan " + both + " --dim n=1 --dim batch=1 --device-memory 1GiB --overhead 64MiB");
  ASSERT_EQ(eager.code, 0) << eager.out << eager.err;
  EXPECT_NE(eager.out.find("each pool's quota is its eager need on strategy:caching"),
            std::string::npos)
      << eager.out;

  fs::path json = dir_ / "share.json";
  r = tool("plan " + both + " --dim n=1 --dim batch=1 --device-memory 1GiB --overhead 64MiB -o " +
           json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["models"].size(), 2u);
  std::size_t quotas = 0;
  for (const auto& m : j["models"]) {
    EXPECT_EQ(m["need_ideal_bytes"].get<std::size_t>(),
              m["weights_bytes"].get<std::size_t>() + m["ideal_arena_bytes"].get<std::size_t>());
    EXPECT_EQ(m["need_eager_bytes"].get<std::size_t>(),
              m["weights_bytes"].get<std::size_t>() + m["eager_peak_bytes"].get<std::size_t>());
    EXPECT_EQ(m["quota_bytes"].get<std::size_t>(), m["need_bytes"].get<std::size_t>());
    EXPECT_GE(m["need_bytes"].get<std::size_t>(), m["need_ideal_bytes"].get<std::size_t>());
    quotas += m["quota_bytes"].get<std::size_t>();
  }
  EXPECT_EQ(j["total_quota_bytes"].get<std::size_t>(), quotas);
  EXPECT_EQ(j["overhead_bytes"].get<std::size_t>(), 64u << 20);
  EXPECT_EQ(j["headroom_bytes"].get<long long>(),
            (1ll << 30) - static_cast<long long>(quotas) - (64ll << 20));

  // The default overhead of a CUDA device (1 GiB) does not fit a 1 GiB device beside them.
  r = tool("plan " + both + " --dim n=1 --dim batch=1 --device-memory 1GiB");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("overhead       1.00 GiB: default for cuda"), std::string::npos) << r.out;

  // Too small a device: exit 1, the shortfall said.
  r = tool("plan " + both + " --dim n=1 --dim batch=1 --device-memory 50MiB");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fit            no"), std::string::npos) << r.out;

  // The runtime accepts every string (once `pools` is a key of the configuration).
  CliRun keys = tool("config --keys");
  if (keys.out.find("`pools`") == std::string::npos)
    GTEST_SKIP() << "this build's configuration has no pools key yet (docs/config.md)";
  r = tool("plan " + both + " --dim n=1 --dim batch=1 --device-memory 2GiB -o " + json.string());
  std::ifstream in2(json);
  auto j2 = nlohmann::json::parse(in2);
  std::vector<std::string> strings = {j2["config"].get<std::string>()};
  for (const auto& m : j2["models"]) strings.push_back(m["config"].get<std::string>());
  for (const auto& s : strings) {
    CliRun c = tool("config '" + s + "'");
    EXPECT_EQ(c.code, 0) << s << "\n" << c.err;
  }
}

TEST_F(PlanCli, FitPrintsTheLargestValueItsNeedsAndTheStringsAndWritesTheFitObject) {
  fs::path json = dir_ / "fit.json";
  CliRun r = tool("plan " + model("resnet50.onnx") +
                  " --fit batch --device-memory 2GiB --runtime eager --solver greedy-size -o " +
                  json.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  const auto& f = j["fit"];
  EXPECT_EQ(f["dim"], "batch");
  EXPECT_EQ(f["limit"], "memory");
  const long value = f["value"].get<long>();
  EXPECT_GT(value, 1);
  EXPECT_LE(f["need_bytes"].get<std::size_t>(), std::size_t{2} << 30);
  EXPECT_GT(f["next_need_bytes"].get<std::size_t>(), std::size_t{2} << 30);
  EXPECT_EQ(j["total_bytes"], f["need_bytes"]);
  EXPECT_NE(r.out.find("fit            batch=" + std::to_string(value) + ":"), std::string::npos)
      << r.out;
  // The answer for every batch up to one: each batch from 1 planned (--fit-every-max, 4096).
  const long every = f["every_value"].get<long>();
  EXPECT_GE(every, 1);
  EXPECT_LE(every, value);
  EXPECT_EQ(f["every_complete"].get<bool>(), every == value);
  EXPECT_NE(r.out.find("answer         batch=" + std::to_string(every) +
                       ": every batch from 1 to " + std::to_string(every) + " fits (each planned)"),
            std::string::npos)
      << r.out;
  // The value printed plans to a fit and the next one does not, each on its own.
  CliRun at = tool("plan " + model("resnet50.onnx") + " --dim batch=" + std::to_string(value) +
                   " --device-memory 2GiB --runtime eager --solver greedy-size");
  EXPECT_EQ(at.code, 0) << at.out;
  CliRun next =
      tool("plan " + model("resnet50.onnx") + " --dim batch=" + std::to_string(value + 1) +
           " --device-memory 2GiB --runtime eager --solver greedy-size");
  EXPECT_EQ(next.code, 1) << next.out;

  // A sequence stops at the position table; each model alone with --fit-each.
  r = tool("plan " + model("bert_base.onnx") + " --fit seq --dim batch=1 --device-memory 64GiB " +
           "--solver greedy-size --fit-every-max 0");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("fit            seq=512:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("limit          model: table 'embeddings.position.weight' has 512 rows"),
            std::string::npos)
      << r.out;
  r = tool("plan " + model("resnet50.onnx") + " " + model("bert_base.onnx") +
           " --fit batch --fit-each --dim seq=128 --device-memory 4GiB --solver greedy-size "
           "--fit-every-max 0 -o " +
           json.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::ifstream in2(json);
  auto each = nlohmann::json::parse(in2)["fit_each"];
  ASSERT_EQ(each.size(), 2u);
  for (const auto& e : each) EXPECT_GT(e["fit"]["value"].get<long>(), 1) << e.dump();

  // Not even 1 fits: exit 1, the need at 1 said.
  r = tool("plan " + model("resnet50.onnx") + " --fit batch --device-memory 64MiB");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("no value of batch fits"), std::string::npos) << r.out;
}

// One vocabulary of device kinds: --device-kind takes the kinds `place --devices` names (each
// Ascend product, gpu=cuda, cpu=host) as well as cuda, npu and host, and an unknown word lists
// them.
TEST_F(PlanCli, DeviceKindTakesPlacesKinds) {
  const std::string base = "plan " + model("tiny.onnx") + " --dim n=1 --device-memory 64GiB";
  for (const auto& [kind, overhead] :
       {std::pair<std::string, std::string>{"910B3", "default for npu"},
        {"310P3", "default for npu"},
        {"gpu", "default for cuda"},
        {"cpu", "default for host"},
        {"npu", "default for npu"}}) {
    SCOPED_TRACE(kind);
    CliRun r = tool(base + " --device-kind " + kind);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("overhead       " +
                         std::string(overhead == "default for host" ? "0 B" : "1.00 GiB") + ": " +
                         overhead),
              std::string::npos)
        << r.out;
  }
  expect_rejected(base + " --device-kind 910Z",
                  "--device-kind 910Z: expected cuda, npu, host or a device kind of `place "
                  "--devices` (910A, 910B3");
}

// One meaning of --json, as on every other command: it prints the JSON instead of the report;
// -o FILE writes the same bytes beside the report. The old --json FILE.json still writes the
// file, with a note on stderr. On plan (one model, a shared device), fit and serve.
TEST_F(PlanCli, JsonPrintsWhatMinusOWrites) {
  // The JSON without the seconds a search took (they differ from run to run).
  auto timeless = [](const std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    std::vector<nlohmann::json*> todo = {&j};
    while (!todo.empty()) {
      nlohmann::json* n = todo.back();
      todo.pop_back();
      if (n->is_object()) n->erase("seconds");
      if (n->is_structured())
        for (auto& child : *n) todo.push_back(&child);
    }
    return j;
  };
  const std::vector<std::string> commands = {
      "plan " + model("tiny.onnx") + " --dim n=1",
      "plan " + model("tiny.onnx") + " " + model("bert_base.onnx") +
          " --dim n=1 --dim batch=1 --dim seq=8 --device-memory 2GiB --solver greedy-size",
      "fit n " + model("tiny.onnx") + " --device-memory 64MiB --device-kind host",
      "serve " + model("gpt2_decoder.onnx") + " --device-memory 4GiB --context 256",
  };
  for (const std::string& c : commands) {
    SCOPED_TRACE(c);
    const fs::path file = dir_ / "out.json";
    fs::remove(file);
    CliRun written = tool(c + " -o " + file.string());
    ASSERT_TRUE(written.code == 0 || written.code == 1) << written.err;
    EXPECT_NE(written.out.find("json           " + file.string()), std::string::npos)
        << written.out;
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    CliRun printed = tool(c + " --json");
    EXPECT_EQ(printed.code, written.code) << printed.err;
    EXPECT_EQ(timeless(printed.out), timeless(bytes)) << printed.out;
    // The old spelling: the file again, the report on stdout, one note on stderr.
    const fs::path old = dir_ / "old.json";
    CliRun legacy = tool(c + " --json " + old.string());
    EXPECT_EQ(legacy.code, written.code) << legacy.err;
    std::ifstream old_in(old, std::ios::binary);
    EXPECT_EQ(timeless(std::string((std::istreambuf_iterator<char>(old_in)), {})), timeless(bytes));
    EXPECT_NE(legacy.err.find("is the old spelling of -o"), std::string::npos) << legacy.err;
    EXPECT_NE(legacy.out.find("json           " + old.string()), std::string::npos) << legacy.out;
  }
}

// One command per product: `fit DIM MODEL...` and `serve MODEL` print what `plan MODEL --fit DIM`
// and `plan --serve MODEL` print (both forms stay), and refuse a missing model or device in one
// line; `serve` takes only the options the serving plan reads.
TEST_F(PlanCli, FitAndServeCommandsPrintWhatPlansFitAndServeFormsPrint) {
  const std::string fit_args =
      " --device-memory 64MiB --runtime eager --solver greedy-size --device-kind host "
      "--fit-every-max 64";
  CliRun old_fit = tool("plan " + model("tiny.onnx") + " --fit n" + fit_args);
  CliRun new_fit = tool("fit n " + model("tiny.onnx") + fit_args);
  ASSERT_EQ(old_fit.code, 0) << old_fit.err;
  EXPECT_EQ(new_fit.code, old_fit.code) << new_fit.err;
  const auto untimed = [](const std::string& text) {  // the "probes ... in S s" line left out
    std::istringstream in(text);
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("probes", 0) != 0) out += line + "\n";
    return out;
  };
  EXPECT_EQ(untimed(new_fit.out), untimed(old_fit.out));
  EXPECT_NE(new_fit.out.find("fit            n="), std::string::npos) << new_fit.out;
  const std::string serve_args =
      " --device-memory 64MiB --context 512 --max-num-seqs 16 --max-batched-tokens 64 "
      "--overhead 0";
  CliRun old_serve = tool("plan --serve " + model("gpt2_decoder.onnx") + serve_args);
  CliRun new_serve = tool("serve " + model("gpt2_decoder.onnx") + serve_args);
  ASSERT_EQ(old_serve.code, 0) << old_serve.err;
  EXPECT_EQ(new_serve.code, 0) << new_serve.err;
  EXPECT_EQ(new_serve.out, old_serve.out);
  EXPECT_NE(new_serve.out.find("engine settings"), std::string::npos) << new_serve.out;
  expect_rejected("fit batch " + model("tiny.onnx"), "fit: give --device-memory SIZE");
  expect_rejected("fit batch --device-memory 1GiB", "model is required");
  expect_rejected("serve --device-memory 1GiB", "model is required");
  expect_rejected("serve " + model("gpt2_decoder.onnx") + " --device-memory 64MiB --solver best",
                  "not expected");
  expect_rejected("serve " + model("gpt2_decoder.onnx"), "needs --device-memory");
}

TEST_F(PlanCli, BadInputsExitTwoWithOneLineBeforeAnyOutput) {
  const std::string tiny = model("tiny.onnx") + " --dim n=1";
  fs::path bad = write("bad.txt", "12\nnot-a-length\n");
  expect_rejected("plan " + dir_.string(), dir_.string() + ": is a directory");
  expect_rejected("plann x", "unknown command 'plann', did you mean 'plan'?");
  expect_rejected("plan " + model("tiny.onnx") + " --buckets n=1,2 --lengths " + bad.string(),
                  "bad.txt:2: 'not-a-length' is not a positive request length");
  expect_rejected("plan " + tiny + " -o /nonexistent/x.json", "-o /nonexistent/x.json");
  // --json takes no file now (the old --json FILE is kept for .json names only): a model named
  // after it is not taken for the file to write.
  expect_rejected("plan --json " + model("tiny.onnx") + " --dim n=1",
                  "--json prints the plan as JSON and takes no value; write a file with -o FILE");
  expect_rejected("plan " + tiny + " --json a.json -o b.json",
                  "-o and --json FILE both name the JSON file");
  expect_rejected("plan " + tiny + " --html " + dir_.string(), "is a directory");
  expect_rejected("plan " + tiny + " --time-limit 0", "--time-limit 0");
  expect_rejected("plan " + tiny + " --align 0", "--align 0");
  expect_rejected("plan " + tiny + " --safety 0.5", "--safety 0.5");
  expect_rejected("plan " + tiny + " --keep-weights-dtype", "--keep-weights-dtype needs --dtype");
  expect_rejected("plan " + tiny + " --runtime eager --no-in-place", "--no-in-place with");
  expect_rejected("plan " + tiny + " --runtime lazy", "--runtime");
  expect_rejected("plan " + tiny + " --solver nope", "--solver nope");
  expect_rejected("plan " + model("tiny.onnx") + " " + model("resnet50.onnx") + " --dim n=1",
                  "give --device-memory SIZE");
  expect_rejected("plan " + tiny + " --device-memory 0", "--device-memory '0'");
  expect_rejected("plan " + tiny + " --device-memory lots", "--device-memory 'lots'");
  expect_rejected("plan " + tiny + " --device-memory 1GiB --html x.html", "--html");
  expect_rejected("plan " + tiny + " --device-memory 1GiB --dim nope=3", "--dim nope");
  expect_rejected("plan " + model("tiny.onnx"), "'n' is not bound");
  expect_rejected("plan " + tiny + " --strategy system", "--strategy system");
  expect_rejected("plan " + tiny + " --strategy strategy:caching,pools:[a:1]", "--strategy");
  expect_rejected("plan " + tiny + " --overhead lots", "--overhead 'lots'");
  expect_rejected("plan " + tiny + " --overhead 5%", "needs --device-memory");
  expect_rejected("plan " + model("tiny.onnx") + " --fit n", "--fit needs --device-memory");
  expect_rejected("plan " + tiny + " --fit n --device-memory 1GiB", "--fit n and --dim n");
  expect_rejected("plan " + model("tiny.onnx") + " --fit n --device-memory 1GiB --fit-every-max -1",
                  "--fit-every-max must be >= 0");
  expect_rejected("plan " + model("bert_base.onnx") + " --dim batch=1 --dim seq=4096",
                  "table 'embeddings.position.weight'");
  // `config` builds the stack before it prints: a rejected string prints nothing but its error.
  expect_rejected("config strategy:static", "needs its size: static_pool_mb");
  // Range errors say what the value must be, in words (no 300-digit bound).
  expect_rejected("info --pid 0", "--pid: value 0 must be a positive number");
}

}  // namespace

namespace {

// The eager figure against PyTorch eager itself, on a small model: torchvision's ResNet-18 at
// 64x64, batch 2, exported to ONNX, one inference recorded with `modelmem run --trace`
// (bench/model/eager_trace.py; bench/model/eager_validation.sh does the same on full-size
// models). Skipped where the project environment lacks torch, torchvision or onnx.
TEST_F(PlanCli, EagerPeakMatchesARecordedPyTorchInference) {
#ifdef MODELMEM_SANITIZED
  GTEST_SKIP() << "a sanitized LD_PRELOAD library cannot be preloaded into python3";
#endif
  if (std::system(MODELMEM_PYTHON " -c 'import torch, torchvision, onnx' >/dev/null 2>&1") != 0)
    GTEST_SKIP()
        << "no torch, torchvision or onnx in the project environment (scripts/setup --runtimes)";
  const std::string script = std::string(MODELMEM_SOURCE_DIR) + "/bench/model/eager_trace.py";
  const fs::path onnx = dir_ / "resnet18.onnx", trace = dir_ / "resnet18.csv";
  ASSERT_EQ(std::system((MODELMEM_PYTHON " " + script + " export resnet18 " + onnx.string() +
                         " 64 >/dev/null 2>&1")
                            .c_str()),
            0);
  // MKL's own cache kept (MKL_DISABLE_FAST_MM empty): warm after the warm-up inferences, the
  // measured one holds PyTorch's tensors only, what the eager figure counts.
  ::setenv("MKL_DISABLE_FAST_MM", "", 1);
  CliRun rec = tool("run --conf strategy:caching,preload_threshold_kb:1 --trace " + trace.string() +
                    " -- " MODELMEM_PYTHON " " + script + " infer resnet18 2 64");
  ASSERT_EQ(rec.code, 0) << rec.err;
  std::string measured_text;
  {
    fs::path out = dir_ / "measured";
    ASSERT_EQ(std::system((MODELMEM_PYTHON " " + script + " measure " + trace.string() + " 2 64 >" +
                           out.string())
                              .c_str()),
              0);
    measured_text = slurp(out);
  }
  const double measured = std::stod(measured_text);
  CliRun plan = tool("plan " + onnx.string() + " --dim batch=2");
  ASSERT_EQ(plan.code, 0) << plan.err;
  const double eager = static_cast<double>(field(plan.out, "eager peak"));
  EXPECT_NEAR(eager / measured, 1.0, 0.05)
      << "plan " << eager << " B, PyTorch " << measured << " B\n"
      << plan.out;
  // The ideal arena is what in-place reuse saves on top: below the eager peak.
  EXPECT_LT(static_cast<double>(field(plan.out, "ideal arena")), eager);
}

}  // namespace
