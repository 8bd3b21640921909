// A served decoder is modelled once (modelmem/sizing/serving.hpp: serve_model): `plan --serve`
// (plan_serving), the serving need (serving_need.hpp) and `place` with serve: take that one
// value, so that a mixture of experts, whose routed experts an engine loads as one tensor per
// layer and projection, gets the same weight blocks and the same need on every path. A
// DeepSeek-V2-Lite-shaped checkpoint (MLA, 64 routed experts + 2 shared, 27 layers, bf16;
// safetensors headers over holes) is the case: before, `place` replayed its 5,000 expert tensors
// one by one and charged about 6 GiB of activations where `plan --serve` charged 0.5 GiB.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/model/checkpoint.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/serving.hpp"
#include "modelmem/sizing/serving_need.hpp"
#include "modelmem/trace/trace.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace modelmem::sizing {
namespace {

class ServedModelOnce : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("modelmem_moe_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << json{
        {"model_type", "deepseek_v2"},   {"num_hidden_layers", 27},
        {"hidden_size", 2048},           {"intermediate_size", 10944},
        {"moe_intermediate_size", 1408}, {"n_routed_experts", 64},
        {"n_shared_experts", 2},         {"first_k_dense_replace", 1},
        {"num_attention_heads", 16},     {"num_key_value_heads", 16},
        {"kv_lora_rank", 512},           {"qk_rope_head_dim", 64},
        {"qk_nope_head_dim", 128},       {"v_head_dim", 128},
        {"vocab_size", 102400},          {"max_position_embeddings", 163840},
        {"torch_dtype", "bfloat16"}}.dump(1);
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> t = {
        {"model.embed_tokens.weight", {102400, 2048}},
        {"model.norm.weight", {2048}},
        {"lm_head.weight", {102400, 2048}}};
    for (int l = 0; l < 27; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      t.push_back({p + "input_layernorm.weight", {2048}});
      t.push_back({p + "post_attention_layernorm.weight", {2048}});
      t.push_back({p + "self_attn.q_proj.weight", {3072, 2048}});
      t.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {576, 2048}});
      t.push_back({p + "self_attn.kv_a_layernorm.weight", {512}});
      t.push_back({p + "self_attn.kv_b_proj.weight", {4096, 512}});
      t.push_back({p + "self_attn.o_proj.weight", {2048, 2048}});
      auto mlp = [&](const std::string& q, std::int64_t inter) {
        t.push_back({q + "gate_proj.weight", {inter, 2048}});
        t.push_back({q + "up_proj.weight", {inter, 2048}});
        t.push_back({q + "down_proj.weight", {2048, inter}});
      };
      if (l == 0) {
        mlp(p + "mlp.", 10944);
        continue;
      }
      t.push_back({p + "mlp.gate.weight", {64, 2048}});
      for (int e = 0; e < 64; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", 1408);
      mlp(p + "mlp.shared_experts.", 2816);
    }
    tensors_ = t.size();
    json h;
    std::size_t off = 0;
    for (const auto& [name, shape] : t) {
      std::size_t n = 2;
      for (auto d : shape) n *= static_cast<std::size_t>(d);
      h[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
      off += n;
    }
    const std::string header = h.dump();
    const fs::path file = dir_ / "model.safetensors";
    {
      std::ofstream out(file, std::ios::binary);
      const std::uint64_t n = header.size();
      for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
      out << header;
    }
    fs::resize_file(file, 8 + header.size() + off);  // a hole: only the header is read
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::size_t tensors_ = 0;
};

TEST_F(ServedModelOnce, AMixtureOfExpertsPlacedAndServedReplaysTheSameBlocksAndNeed) {
  ServeOptions o;
  o.device_memory = 80 * kGiB;
  o.context = 4096;
  o.max_num_seqs = 8;
  const ServedModel served = serving_model(dir_.string(), o);
  // 26 MoE layers x 3 projections of 64 experts each load as one block: 26 x 3 x 63 fewer.
  EXPECT_EQ(served.weight_blocks.size(), tensors_ - 26 * 3 * 63);
  std::size_t blocks = 0;
  for (std::size_t b : served.weight_blocks) blocks += b;
  EXPECT_EQ(blocks, served.weights_bytes);
  EXPECT_NEAR(static_cast<double>(served.weights_bytes) / kGiB, 29.26, 0.01);

  // plan --serve on 80 GiB: its need of the weights and the steps.
  const ServePlan p = plan_serving(dir_.string(), o);
  EXPECT_EQ(p.need.need, served.need.need);

  // place with serve: (8 sequences of 4096) on one 80 GiB device: the same model, its pool the
  // serving loop holding that KV cache.
  ModelSpec m;
  m.name = "v2-lite";
  m.path = dir_.string();
  m.serve = ServeSpec{};
  m.serve->context = 4096;
  m.serve->concurrency = 8;
  const Placement pl = place({m}, parse_devices("1x80GiB"));
  ASSERT_TRUE(pl.fits()) << render_text(pl);
  const PlacementNeed& n = pl.needs[0].at(Backend::kCuda);
  SCOPED_TRACE(n.basis);
  EXPECT_EQ(n.weights, p.weights_bytes);

  // The serving sequence place replays opens with the very weight blocks plan --serve replays.
  ServingLoad load;
  load.tokens = 8 * 4096;
  load.sequences = 8;
  const ServingSequence s = serving_sequence(served, load);
  ASSERT_GE(s.trace.events.size(), served.weight_blocks.size());
  for (std::size_t i = 0; i < served.weight_blocks.size(); ++i)
    ASSERT_EQ(s.trace.events[i].size, served.weight_blocks[i]) << i;
  EXPECT_EQ(s.kv, 8 * p.sequence_bytes);  // 8 x 4096 tokens of 27 x (512 + 64) x 2 bytes

  // One need on both paths: place's pool is plan --serve's need (weights and steps on the
  // caching pool) with the KV cache it holds beside it, to the MiB.
  const ServingNeed sn = serving_need_on_strategy(served, load, "caching");
  EXPECT_EQ(sn.pool.need, p.need.need + s.kv)
      << "place " << sn.pool.need / kMiB << " MiB, plan --serve " << p.need.need / kMiB
      << " MiB + KV " << s.kv / kMiB << " MiB";
  EXPECT_LT(n.need, p.need.need + 2 * s.kv);
  // The activations on the strategy: well under a GiB, as plan --serve says.
  EXPECT_LT(p.activation_bytes, kGiB);
}

}  // namespace
}  // namespace modelmem::sizing
