// The serving journey end to end: a GPT-2-style decoder written in PyTorch (tests/sizing/
// gpt2_decoder.py) exported to ONNX with its KV cache; `modelmem plan --serve` on it; a serving
// loop that holds the weights, a step's activations and the KV cache of its sequences in
// fixed-size blocks under one device budget (a quota) and fits exactly the predicted blocks; the
// activation peaks of a decode step and a prefill chunk recorded with `modelmem run --trace`
// against the plan; the same model as a checkpoint folder agreeing with the ONNX path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/serving.hpp"
#include "support/command.hpp"

namespace fs = std::filesystem;
using namespace modelmem;
using nlohmann::json;

namespace {

const std::string kScript = std::string(MODELMEM_SOURCE_DIR) + "/tests/sizing/gpt2_decoder.py";
// The plan's figures of the tests below (tests/sizing/gpt2_decoder.py: 2 layers, 4 heads of 64).
const std::string kServe =
    " --device-memory 64MiB --context 512 --max-num-seqs 16 --max-batched-tokens 64";

class Serving : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("modelmem_serving_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    have_torch_ = std::system("/usr/bin/python3 -c 'import torch, onnx' >/dev/null 2>&1") == 0;
    if (!have_torch_) return;
    ASSERT_EQ(std::system(("/usr/bin/python3 " + kScript + " export " + (dir_ / "g.onnx").string() +
                           " >/dev/null 2>&1")
                              .c_str()),
              0);
    ASSERT_EQ(std::system(("/usr/bin/python3 " + kScript + " checkpoint " + (dir_ / "ck").string() +
                           " >/dev/null 2>&1")
                              .c_str()),
              0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (!have_torch_) GTEST_SKIP() << "python3-torch or python3-onnx is not installed";
  }

  static modelmem::testing::CommandResult tool(const std::string& args) {
    return modelmem::testing::run_command(std::string(MODELMEM_CLI) + " " + args + " 2>&1");
  }
  static json plan_json(const std::string& args, const std::string& name) {
    const fs::path out = dir_ / name;
    auto r = tool("plan --serve " + args + " --json " + out.string());
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream in(out);
    return json::parse(in);
  }
  static double measured_step(const std::string& kind, int n, std::size_t input_bytes) {
    const fs::path trace = dir_ / (kind + ".csv");
    auto rec = tool("run --conf strategy:caching,preload_threshold_kb:1 --trace " + trace.string() +
                    " -- /usr/bin/python3 " + kScript + " step " + kind + " " + std::to_string(n) +
                    " 512");
    EXPECT_EQ(rec.code, 0) << rec.out;
    auto m = modelmem::testing::run_command("/usr/bin/python3 " + kScript + " measure " +
                                            trace.string() + " " + std::to_string(input_bytes));
    EXPECT_EQ(m.code, 0) << m.out;
    return std::stod(m.out);
  }

  static inline fs::path dir_;
  static inline bool have_torch_ = false;
};

TEST_F(Serving, PlanSeparatesWeightsKvAndStepActivations) {
  json j = plan_json((dir_ / "g.onnx").string() + kServe, "onnx.json");
  // Per token: 2 layers x (K + V) x 4 heads x 64 x 4 bytes (float32 as exported).
  EXPECT_EQ(j["kv_bytes_per_token"], 4096);
  EXPECT_EQ(j["kv_layers"]["full"]["layers"], 2);
  EXPECT_EQ(j["kv_block_bytes"], 16 * 4096);
  const std::size_t kv_tokens = j["kv_tokens"], blocks = j["kv_blocks"];
  EXPECT_EQ(kv_tokens, blocks * 16);
  const std::size_t device = 64u << 20;
  const std::size_t non_kv = j["weights_bytes"].get<std::size_t>() +
                             j["activation_bytes"].get<std::size_t>() +
                             j["overhead_bytes"].get<std::size_t>();
  EXPECT_EQ(blocks, (device - non_kv) / (16 * 4096));
  EXPECT_EQ(j["max_context"], kv_tokens);
  EXPECT_NEAR(j["max_concurrency"].get<double>(), static_cast<double>(blocks) / 32, 1e-9);
  // The KV cache is outside the step's activations: the decode step of 16 sequences at 512
  // tokens would hold 16 x 512 x 4096 = 32 MiB of KV, far more than its activations.
  EXPECT_LT(j["decode_activation_bytes"].get<std::size_t>(), 2u << 20);
  // The engines' settings give back the same pool.
  EXPECT_EQ(j["engines"]["vllm"]["--kv-cache-memory-bytes"], std::to_string(blocks * 16 * 4096));
  EXPECT_EQ(j["engines"]["vllm"]["--max-model-len"], "512");
  EXPECT_EQ(j["engines"]["sglang"]["--max-total-tokens"], std::to_string(kv_tokens));
  EXPECT_EQ(j["engines"]["tensorrt_llm"]["max_tokens"], std::to_string(kv_tokens));
  const double util =
      std::stod(j["engines"]["vllm"]["--gpu-memory-utilization"].get<std::string>());
  EXPECT_GE(util * device, static_cast<double>(non_kv + blocks * 16 * 4096));
  EXPECT_LT(util * device, static_cast<double>(non_kv + blocks * 16 * 4096) + 1e-4 * device);
  // The library call gives the same figures.
  sizing::ServeOptions o;
  o.device_memory = device;
  o.context = 512;
  o.max_num_seqs = 16;
  o.max_batched_tokens = 64;
  sizing::ServePlan p = sizing::plan_serving((dir_ / "g.onnx").string(), o);
  EXPECT_EQ(p.kv_tokens, kv_tokens);
  EXPECT_EQ(p.weights_bytes, j["weights_bytes"].get<std::size_t>());
}

// The serving loop: one device budget (a quota of 64 MiB) holds the weights, the activation
// peak of a step and the overhead, then the KV cache of 16 sequences grows token by token, a
// block of 16 tokens at a time, until a block is refused.
TEST_F(Serving, ServingLoopFitsThePredictedTokensAndTheNextBlockIsRefused) {
  json j = plan_json((dir_ / "g.onnx").string() + kServe + " --overhead 1MiB", "loop.json");
  const std::size_t block = j["kv_block_bytes"], kv_tokens = j["kv_tokens"];
  alloc::QuotaOptions q;
  q.name = "device";
  q.quota = 64u << 20;
  alloc::QuotaAdaptor device(std::make_shared<alloc::SystemAllocator>(), q);
  std::vector<void*> held;
  for (const char* part : {"weights_bytes", "activation_bytes", "overhead_bytes"})
    held.push_back(device.allocate(j[part].get<std::size_t>()));
  const int sequences = 16;
  std::vector<std::size_t> tokens(sequences, 0), capacity(sequences, 0);
  std::vector<bool> stopped(sequences, false);
  std::size_t blocks = 0, refused = 0;
  for (int live = sequences; live > 0;) {
    for (int s = 0; s < sequences; ++s) {
      if (stopped[s]) continue;
      if (tokens[s] == capacity[s]) {
        try {
          held.push_back(device.allocate(block));
          ++blocks;
          capacity[s] += 16;
        } catch (const QuotaExceeded&) {
          ++refused;
          stopped[s] = true;
          --live;
          continue;
        }
      }
      ++tokens[s];
    }
  }
  std::size_t stored = 0;
  for (auto t : tokens) stored += t;
  EXPECT_EQ(stored, kv_tokens);  // every block filled: the predicted tokens, to the token
  EXPECT_EQ(blocks, j["kv_blocks"].get<std::size_t>());
  EXPECT_EQ(refused, 16u);  // the next block, for each sequence, is refused
  EXPECT_LT(device.quota() - device.used(), block);
  for (void* p : held) device.deallocate(p);
}

// The activation peaks the plan gives for a decode step and a prefill chunk against PyTorch
// eager running the same steps with the KV cache in preallocated buffers (as an engine does).
TEST_F(Serving, StepActivationPeaksMatchARecordedPyTorchRun) {
#ifdef MODELMEM_SANITIZED
  GTEST_SKIP() << "a sanitized LD_PRELOAD library cannot be preloaded into python3";
#endif
  json j = plan_json((dir_ / "g.onnx").string() + kServe, "peaks.json");
  // Inputs made before the first marker: ids and positions (int64) and the additive mask.
  const double decode = measured_step("decode", 16, 16 * 8 * 2 + 512 * 4);
  const double prefill = measured_step("prefill", 64, 64 * 8 * 2 + 64 * 512 * 4);
  EXPECT_NEAR(j["decode_activation_bytes"].get<double>() / decode, 1.0, 0.05)
      << "plan " << j["decode_activation_bytes"] << " B, PyTorch " << decode << " B";
  EXPECT_NEAR(j["prefill_activation_bytes"].get<double>() / prefill, 1.0, 0.05)
      << "plan " << j["prefill_activation_bytes"] << " B, PyTorch " << prefill << " B";
}

TEST_F(Serving, CheckpointPathAgreesWithTheOnnxPath) {
  json onnx = plan_json((dir_ / "g.onnx").string() + kServe, "a.json");
  json ck = plan_json((dir_ / "ck").string() + kServe + " --onnx " + (dir_ / "g.onnx").string(),
                      "b.json");
  EXPECT_EQ(ck["source"], "checkpoint");
  EXPECT_EQ(ck["kv_bytes_per_token"], onnx["kv_bytes_per_token"]);
  EXPECT_EQ(ck["activation_bytes"], onnx["activation_bytes"]);
  // The safetensors hold the state dict, the export the same tensors as initializers.
  EXPECT_EQ(ck["weights_bytes"], onnx["weights_bytes"]);
  EXPECT_EQ(ck["kv_tokens"], onnx["kv_tokens"]);
  EXPECT_EQ(ck["engines"], onnx["engines"]);
  // Without an export the checkpoint's activations are the config formula's estimate.
  json est = plan_json((dir_ / "ck").string() + kServe, "c.json");
  EXPECT_EQ(est["kv_bytes_per_token"], onnx["kv_bytes_per_token"]);
  EXPECT_NE(est["activation_source"].get<std::string>().find("estimate"), std::string::npos);
}

TEST_F(Serving, BadInputIsOneLineBeforeAnyOutput) {
  auto rejects = [&](const std::string& args, const std::string& needle) {
    auto r = tool("plan " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  };
  const std::string g = (dir_ / "g.onnx").string();
  rejects("--serve " + g, "--serve needs --device-memory");
  rejects("--serve " + g + " --device-memory 1MiB", "do not leave room for a KV cache");
  rejects("--serve " + g + " --device-memory 64MiB --kv-dtype fp4", "--kv-dtype fp4");
  rejects("--serve " + g + " --device-memory 64MiB --kv nope", "--kv nope: expected INPUT=OUTPUT");
  rejects("--serve " + g + " --device-memory 64MiB --kv past_key_values.0.key=missing",
          "no output 'missing'");
  rejects("--serve " + g + " --device-memory 64MiB --tp 2", "--tp splits a checkpoint");
  rejects("--serve " + (dir_ / "nothing").string() + " --device-memory 64MiB", "no such ONNX file");
  rejects("--serve " + g + " " + g + " --device-memory 64MiB", "give no other model");
  rejects("--serve " + g + " --device-memory 64MiB --mean-context 100 --lengths " + g, "give one");
}

}  // namespace
