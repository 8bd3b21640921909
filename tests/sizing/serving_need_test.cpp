// The promise of a served LLM's quota (modelmem/sizing/serving_need.hpp): `modelmem place` gives
// the test decoder (models/gpt2_decoder.onnx, the graph of tests/sizing/gpt2_decoder.py) with
// `serve:` a pool at its serving need on the strategy; its serving loop in PyTorch
// (tests/sizing/serve_child.py) runs under exactly the placed container's MODELMEM_ALLOC_CONF
// and is served, and one segment less (the replayed sequence's own figure, without the slack for
// PyTorch's order) is refused inside that pool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/sizing/serving_need.hpp"
#include "modelmem/trace/trace.hpp"
#include "support/command.hpp"

namespace fs = std::filesystem;

namespace modelmem::sizing {
namespace {

const std::string kSource = MODELMEM_SOURCE_DIR;
const std::string kModel = kSource + "/models/gpt2_decoder.onnx";

ServeOptions loop_options() {  // serve_child.py 8 512 512: 8 sequences of 512, chunks of 512
  ServeOptions o;
  o.device_memory = std::size_t{1} << 30;
  o.overhead = "0";
  o.context = 512;
  o.max_num_seqs = 8;
  o.max_batched_tokens = 512;
  return o;
}

TEST(ServingNeed, TheSequenceHoldsTheWeightsAndTheKvCacheThenRunsStepsOfTheStepPlans) {
  ServingLoad load;
  load.tokens = 8 * 512;
  load.sequences = 8;
  const ServingSequence s = serving_sequence(kModel, loop_options(), load);
  const ServePlan p = plan_serving(kModel, loop_options());
  EXPECT_EQ(s.weights, p.weights_bytes);
  EXPECT_EQ(s.kv, 8 * 512 * p.kv_bytes_per_token);  // 2 layers x (keys, values), 4 MiB each
  EXPECT_EQ(s.kv, 16 * kMiB);
  EXPECT_EQ(s.prefill_peak, p.prefill_activation_bytes);
  EXPECT_EQ(s.decode_peak, p.decode_activation_bytes);
  EXPECT_EQ(s.steps, 5u);
  EXPECT_TRUE(s.planned);
  const trace::Blocks blocks = trace::match_blocks(s.trace);
  EXPECT_EQ(trace::peak_live_bytes(s.trace, blocks), s.weights + s.kv + s.prefill_peak);
  // Requests below the preload's threshold are left to the C library.
  const ServingSequence host = serving_sequence(kModel, loop_options(), load, 64 * 1024);
  for (const auto& e : host.trace.events)
    if (e.kind == alloc::EventKind::kAlloc) {
      EXPECT_GE(e.size, 64u * 1024);
    }
  // The steps' peaks are those of the blocks left in: the sequence's peak is still the weights,
  // the KV cache and the prefill's peak, and each step replayed alone peaks at its own.
  const trace::Blocks host_blocks = trace::match_blocks(host.trace);
  EXPECT_EQ(trace::peak_live_bytes(host.trace, host_blocks),
            host.weights + host.kv + host.prefill_peak);
  const ServedModel served = serving_model(kModel, loop_options());
  for (const auto& [step, peak] : {std::pair{&served.decode, host.decode_peak},
                                   std::pair{&served.prefill, host.prefill_peak}}) {
    std::size_t live = 0, most = 0;
    std::map<std::uintptr_t, std::size_t> blocks_in;
    for (const auto& e : step->inference.events)
      if (e.kind == alloc::EventKind::kAlloc && e.size >= 64 * 1024) {
        blocks_in[e.address] = e.size;
        most = std::max(most, live += e.size);
      } else if (e.kind == alloc::EventKind::kFree && blocks_in.count(e.address) != 0) {
        live -= blocks_in[e.address];
        blocks_in.erase(e.address);
      }
    EXPECT_EQ(peak, most);
  }
  EXPECT_LT(host.decode_peak, s.decode_peak);  // the decoder's step has blocks below 64 KiB
  const ServingNeed n = serving_need_on_strategy(kModel, loop_options(), load, "caching");
  EXPECT_GE(n.pool.replay_mib * kMiB, n.pool.peak_live);
  EXPECT_EQ(n.pool.order_slack, 40 * kMiB);  // the steps' requests are above 1 MiB
  EXPECT_EQ(n.pool.need, (n.pool.replay_mib + 40) * kMiB);
  EXPECT_EQ(n.pool.weights, s.weights);
  EXPECT_EQ(n.kv, s.kv);
  EXPECT_EQ(n.pool.inferences, s.steps);
}

class ServedQuota : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef MODELMEM_SANITIZED
    GTEST_SKIP() << "a sanitized LD_PRELOAD library cannot be preloaded into python3";
#endif
    if (std::system(MODELMEM_PYTHON " -c 'import torch' >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "no torch in the project environment (scripts/setup --runtimes)";
  }
};

// The serving loop under each configuration, the runs side by side (each is mostly PyTorch's
// import); their outputs in order.
std::vector<std::string> serve(const std::vector<std::string>& confs, const fs::path& dir) {
  std::string script;
  for (std::size_t i = 0; i < confs.size(); ++i)
    script += std::string(MODELMEM_CLI) + " run --report --conf '" + confs[i] +
              "' -- " MODELMEM_PYTHON " " + kSource + "/tests/sizing/serve_child.py 8 512 512 > " +
              (dir / std::to_string(i)).string() + " 2>&1 & ";
  modelmem::testing::run_command(script + "wait");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < confs.size(); ++i) {
    std::ifstream in(dir / std::to_string(i));
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

TEST_F(ServedQuota, TheServingLoopRunsInThePlacedPoolAndIsRefusedWithoutTheOrderSlack) {
  const fs::path models =
      fs::temp_directory_path() / ("modelmem_served_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(models);
    out << "models:\n  - name: gpt2\n    model: " << kModel
        << "\n    serve: {context: 512, concurrency: 8, max_batched_tokens: 512}\n";
  }
  const auto placed =
      modelmem::testing::run_command(std::string(MODELMEM_CLI) + " place --models " +
                                     models.string() + " --devices 1x200MiB:cpu 2>&1");
  fs::remove(models);
  ASSERT_EQ(placed.code, 0) << placed.out;
  const std::string tag = "config         gpt2 on host: ";
  const std::size_t at = placed.out.find(tag);
  ASSERT_NE(at, std::string::npos) << placed.out;
  const std::string conf =
      placed.out.substr(at + tag.size(), placed.out.find('\n', at) - at - tag.size());
  // The quota is the serving need on the strategy of the cache the placement holds (whole
  // blocks of the serving plan, at least the 8 x 512 tokens asked), as the library computes it.
  const std::size_t pool = std::stoul(conf.substr(conf.find("[gpt2:") + 6));
  EXPECT_EQ(conf, "strategy:caching,pools:[gpt2:" + std::to_string(pool) + "],default_pool:gpt2");
  const std::size_t in = placed.out.find(" tokens in ");
  ASSERT_NE(in, std::string::npos) << placed.out;
  ServingLoad load;
  load.tokens = std::stoul(placed.out.substr(placed.out.rfind('(', in) + 1));
  load.sequences = 8;
  EXPECT_GE(load.tokens, 8u * 512);
  const ServingNeed n =
      serving_need_on_strategy(kModel, loop_options(), load, "caching", 64 * 1024);
  EXPECT_EQ(pool, n.pool.need_mib);
  EXPECT_NE(placed.out.find("serving need on strategy:caching"), std::string::npos) << placed.out;
  EXPECT_EQ(placed.out.find("a guess"), std::string::npos) << placed.out;

  // Without the slack for PyTorch's order (the replayed need alone) the loop is refused.
  const std::string less =
      "strategy:caching,pools:[gpt2:" + std::to_string(pool - n.pool.order_slack / kMiB) +
      "],default_pool:gpt2";
  const fs::path dir =
      fs::temp_directory_path() / ("modelmem_served_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> runs = serve({conf, less}, dir);
  fs::remove_all(dir);
  EXPECT_NE(runs[0].find("ok 8"), std::string::npos) << conf << "\n" << runs[0];
  EXPECT_NE(runs[1].find("refused 8"), std::string::npos) << less << "\n" << runs[1];
  EXPECT_NE(runs[1].find("pool 'gpt2'"), std::string::npos) << runs[1];
}

}  // namespace
}  // namespace modelmem::sizing
