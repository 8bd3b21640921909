// End to end: the example models through every solver, the JSON and HTML outputs, buckets,
// padding, precision, presets, and the `modelmem plan` command's output and exit codes.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "modelmem/core/error.hpp"
#include "modelmem/model/buckets.hpp"
#include "modelmem/model/family.hpp"
#include "modelmem/model/order.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/model/solve.hpp"
#include "support/command.hpp"

namespace modelmem::model {
namespace {

const std::string kModelDir = std::string(MODELMEM_SOURCE_DIR) + "/models/";
const std::string kTool = std::string(MODELMEM_BINARY_DIR) + "/modelmem";

plan::SolveOptions quick() {
  plan::SolveOptions o;
  o.time_limit = std::chrono::milliseconds(500);
  return o;
}

std::filesystem::path temp_dir() {
  auto dir =
      std::filesystem::temp_directory_path() / ("modelmem_plan_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

using CmdResult = ::modelmem::testing::CommandResult;

// `command` with its standard error in `out` too.
CmdResult run(const std::string& command) {
  return ::modelmem::testing::run_command(command + " 2>&1");
}

struct Case {
  const char* file;
  std::map<std::string, std::int64_t> dims;
};
const Case kCases[] = {{"tiny.onnx", {{"n", 1}}},
                       {"resnet50.onnx", {{"batch", 1}}},
                       {"resnet50.onnx", {{"batch", 8}}},
                       {"bert_base.onnx", {{"batch", 1}, {"seq", 128}}}};

TEST(Plan, EverySolverGivesAValidPlanOnEveryModelAndOrder) {
  for (const auto& c : kCases) {
    Graph g = load_onnx(kModelDir + c.file, LoadOptions{c.dims});
    for (bool memory : {false, true}) {
      LifetimeOptions lo;
      if (memory) {
        OrderResult r = memory_order(g, lo);
        EXPECT_LE(r.peak, r.stored_peak) << c.file;
        lo.order = r.order;
      }
      for (const auto& solver : plan::solver_names()) {
        SolvedModel mp = solve_model(g, lo, solver, quick());
        ASSERT_TRUE(mp.solve.plan) << c.file << " " << solver;
        EXPECT_TRUE(plan::validate(mp.lifetimes.problem, *mp.solve.plan))
            << c.file << " " << solver;
        EXPECT_GE(mp.solve.plan->arena_size, mp.lower_bound);
      }
      SolvedModel best = solve_model(g, lo, "best", quick());
      EXPECT_LE(static_cast<double>(best.solve.plan->arena_size),
                1.01 * static_cast<double>(best.lower_bound))
          << c.file << (memory ? " memory order" : " stored order");
    }
  }
}

TEST(Plan, ModelFigures) {
  Graph resnet = load_onnx(kModelDir + "resnet50.onnx", {{{"batch", 1}}});
  Lifetimes lt = build_lifetimes(resnet);
  // 25.5 M float parameters after BatchNorm folding, summed independently with python3-onnx.
  EXPECT_EQ(lt.weights_bytes, 102031776u);
  EXPECT_EQ(guess_family(resnet), "cnn");
  Graph bert = load_onnx(kModelDir + "bert_base.onnx", {{{"batch", 2}, {"seq", 64}}});
  EXPECT_GT(bert.folded_nodes, 0u);  // the Shape/Gather/Concat chains of the dynamic axes
  EXPECT_EQ(build_lifetimes(bert).weights_bytes, 435412992u);
  EXPECT_EQ(guess_family(bert), "transformer");
  std::size_t softmax = 0;
  for (const auto& n : bert.nodes) {
    if (n.op_type != "Softmax") continue;
    ++softmax;
    EXPECT_EQ(bert.tensors[n.outputs[0]].shape, (std::vector<std::int64_t>{2, 12, 64, 64}));
  }
  EXPECT_EQ(softmax, 12u);
}

TEST(Plan, TinyJsonMatchesHandNumbers) {
  Graph g = load_onnx(kModelDir + "tiny.onnx", {{{"n", 1}}});
  SolvedModel mp = solve_model(g, {}, "best", quick());
  EXPECT_EQ(mp.solve.plan->arena_size, 1024u);  // = lower bound, see tiny_test.cpp
  auto j = plan_json(g, mp);
  EXPECT_EQ(j["arena_bytes"], 1024u);
  EXPECT_EQ(j["weights_bytes"], 106512u);
  EXPECT_EQ(j["lower_bound_bytes"], 1024u);
  EXPECT_EQ(j["steps"].size(), 7u);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& t : j["tensors"]) by_name[t["name"]] = t;
  EXPECT_EQ(by_name.size(), 8u);
  EXPECT_EQ(by_name["A"]["offset"], by_name["B"]["offset"]);
  EXPECT_EQ(by_name["C"]["offset"], by_name["E"]["offset"]);
  EXPECT_EQ(by_name["E"]["first"], 4);
  EXPECT_EQ(by_name["E"]["last"], 5);
  EXPECT_EQ(by_name["Y"]["last"], 6);
  EXPECT_EQ(by_name["X"]["first"], 0);
  EXPECT_EQ(by_name["A"]["size"], 512u);
}

TEST(Plan, PrecisionHalvesFloatActivations) {
  Graph g = load_onnx(kModelDir + "resnet50.onnx", {{{"batch", 1}}});
  LifetimeOptions half;
  half.float_bytes = 2;
  auto full = plan::lower_bound(build_lifetimes(g).problem);
  auto reduced = plan::lower_bound(build_lifetimes(g, half).problem);
  EXPECT_EQ(reduced * 2, full);  // every ResNet activation is float32 and 128-byte multiple
}

TEST(Buckets, TinyBucketsScaleByHand) {
  BucketSpec spec = parse_buckets("n=4,1,2,2");
  EXPECT_EQ(spec.values, (std::vector<std::int64_t>{1, 2, 4}));
  auto plans = plan_buckets(kModelDir + "tiny.onnx", {}, spec, {}, "best", quick());
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].lower_bound, 1024u);
  EXPECT_EQ(plans[1].lower_bound, 2048u);
  EXPECT_EQ(plans[2].lower_bound, 4096u);
  EXPECT_EQ(plans[2].arena, 4096u);
  EXPECT_EQ(plans[0].weights, 106512u);
}

TEST(Buckets, BertSequenceBuckets) {
  auto plans = plan_buckets(kModelDir + "bert_base.onnx", {{{"batch", 1}}},
                            parse_buckets("seq=32,64,128"), {}, "best", quick());
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_LT(plans[0].arena, plans[1].arena);
  EXPECT_LT(plans[1].arena, plans[2].arena);
  Graph g = load_onnx(kModelDir + "bert_base.onnx", {{{"batch", 1}, {"seq", 64}}});
  EXPECT_EQ(plans[1].lower_bound, plan::lower_bound(build_lifetimes(g).problem));
}

TEST(Buckets, MemoryOrderPerBucket) {
  const BucketSpec spec = parse_buckets("seq=32,128");
  auto stored =
      plan_buckets(kModelDir + "bert_base.onnx", {{{"batch", 1}}}, spec, {}, "best", quick());
  auto memory =
      plan_buckets(kModelDir + "bert_base.onnx", {{{"batch", 1}}}, spec, {}, "best", quick(), true);
  ASSERT_EQ(memory.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    Graph g = load_onnx(kModelDir + "bert_base.onnx", {{{"batch", 1}, {"seq", spec.values[i]}}});
    LifetimeOptions lo;
    lo.order = memory_order(g, {}).order;
    // Each bucket is planned in its own memory order: its lower bound is that order's.
    EXPECT_EQ(memory[i].lower_bound, plan::lower_bound(build_lifetimes(g, lo).problem));
    EXPECT_LE(memory[i].lower_bound, stored[i].lower_bound);
  }
}

TEST(Buckets, BadSpecs) {
  EXPECT_THROW(parse_buckets("seq"), InvalidInput);
  EXPECT_THROW(parse_buckets("seq=32,,64"), InvalidInput);
  EXPECT_THROW(parse_buckets("seq=0"), InvalidInput);
  EXPECT_THROW(parse_buckets("=32"), InvalidInput);
}

TEST(Padding, WasteOfABucketSet) {
  auto pad = padding_waste(parse_buckets("seq=32,64,128"), {10, 32, 33, 100, 200});
  EXPECT_EQ(pad.requests, 5u);
  EXPECT_EQ(pad.too_long, 1u);
  EXPECT_EQ(pad.per_bucket, (std::vector<std::size_t>{2, 1, 1}));
  EXPECT_EQ(pad.tokens, 175u);
  EXPECT_EQ(pad.padded_tokens, 256u);  // 32 + 32 + 64 + 128
  EXPECT_DOUBLE_EQ(pad.waste(), 81.0 / 256.0);
}

TEST(Padding, LengthsFile) {
  auto dir = temp_dir();
  std::ofstream(dir / "ok.txt") << "# lengths\n12\n\n 40 \n";
  EXPECT_EQ(read_lengths((dir / "ok.txt").string()), (std::vector<std::int64_t>{12, 40}));
  std::ofstream(dir / "bad.txt") << "12\nabc\n";
  try {
    read_lengths((dir / "bad.txt").string());
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:2"), std::string::npos) << e.what();
  }
}

TEST(Presets, SeedTable) {
  EXPECT_EQ(seed_preset("cnn").provisioned(), static_cast<std::size_t>(512.0 * 1.2 * 1048576));
  EXPECT_EQ(seed_preset("transformer").pool_bytes, 1024u << 20);
  EXPECT_DOUBLE_EQ(seed_preset("gan").factor, 1.3);
  EXPECT_THROW(seed_preset("rnn"), InvalidInput);
}

TEST(Html, SelfContainedAndRendersInHeadlessChromium) {
  Graph g = load_onnx(kModelDir + "bert_base.onnx", {{{"batch", 1}, {"seq", 32}}});
  SolvedModel mp = solve_model(g, {}, "best", quick());
  std::string html = plan_html(g, mp, "bert </script> <b>test</b>");
  EXPECT_EQ(html.find("http://"),
            html.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("<b>test"), std::string::npos);  // the title is escaped
  auto dir = temp_dir();
  auto file = dir / "plan.html";
  std::ofstream(file) << html;
  if (!std::filesystem::exists("/usr/bin/chromium"))
    GTEST_SKIP() << "chromium is not installed: page not rendered";
  auto profile = dir / "profile";
  CmdResult r =
      run("timeout 90 /usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run "
          "--disable-background-networking --disable-component-update --disable-sync "
          "--user-data-dir=" +
          profile.string() + " --dump-dom file://" + file.string());
  EXPECT_NE(r.out.find("data-status=\"rendered-ok\""), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_EQ(r.out.find("data-status=\"error"), std::string::npos);
  // Nothing for the reader says "rendered-ok": the status line is for errors.
  EXPECT_NE(r.out.find("<p id=\"status\"></p>"), std::string::npos) << r.out.substr(0, 2000);
  // One rectangle per buffer was drawn.
  std::size_t rects = 0;
  for (std::size_t p = 0; (p = r.out.find("class=\"buf\"", p)) != std::string::npos; ++p) ++rects;
  EXPECT_EQ(rects, mp.lifetimes.problem.buffers.size());
}

TEST(Cli, TinyReportAndJson) {
  auto json = temp_dir() / "tiny.json";
  CmdResult r =
      run(kTool + " plan " + kModelDir + "tiny.onnx --dim n=1 --safety 1.5 -o " + json.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("planned arena  1,024 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower bound    1,024 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights        106,512 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak           step 2 of 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" x 1.5 (--safety, whole MiB)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(weights + arena) x"), std::string::npos) << r.out;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["arena_bytes"], 1024u);
  EXPECT_EQ(j["weights_bytes"], 106512u);
}

TEST(Cli, OrderDtypeBucketsLengths) {
  auto lengths = temp_dir() / "lengths.txt";
  std::ofstream(lengths) << "1\n2\n3\n4\n";
  CmdResult r =
      run(kTool + " plan " + kModelDir +
          "tiny.onnx --order memory --dtype fp16 --buckets n=2,4 --lengths " + lengths.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("order          memory (exact"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bucket         n=2      arena 1,024 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bucket         n=4      arena 2,048 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one arena serving every bucket: 2,048 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 requests, 10 tokens padded to 12"), std::string::npos) << r.out;
}

TEST(Cli, BadInputsExitWithTwo) {
  auto dir = temp_dir();
  std::ofstream(dir / "text.onnx") << "hello";
  CmdResult r = run(kTool + " plan " + (dir / "text.onnx").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("text.onnx: not an ONNX model"), std::string::npos) << r.out;
  r = run(kTool + " plan " + kModelDir + "tiny.onnx");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("'n' is not bound"), std::string::npos) << r.out;
  r = run(kTool + " plan " + kModelDir + "tiny.onnx --dim n=1 --solver nope");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run(kTool + " plan " + kModelDir + "tiny.onnx --dim n=x");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run(kTool + " plan " + kModelDir + "tiny.onnx --lengths /dev/null");
  EXPECT_EQ(r.code, 2) << r.out;
}

}  // namespace
}  // namespace modelmem::model
