// Hugging Face checkpoints read from config.json and safetensors headers only: the KV bytes per
// token of public architectures from their published config values, exact weight bytes from
// headers over sparse files (no data), tensor-parallel shares, and bad files named.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "modelmem/core/error.hpp"
#include "modelmem/model/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace modelmem;
using nlohmann::json;

namespace {

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
};

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("modelmem_ck_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void config(const json& c) { std::ofstream(dir_ / "config.json") << c.dump(1); }

  // A safetensors file whose data is a hole: the header, then the file extended to its size.
  std::size_t shard(const std::string& file, const std::vector<Spec>& tensors,
                    const std::string& dtype = "BF16", std::size_t esize = 2) {
    json h;
    std::size_t off = 0;
    for (const auto& t : tensors) {
      std::size_t n = esize;
      for (auto d : t.shape) n *= static_cast<std::size_t>(d);
      h[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
      off += n;
    }
    h["__metadata__"] = {{"format", "pt"}};
    write_raw(file, h.dump(), off);
    return off;
  }
  void write_raw(const std::string& file, const std::string& header, std::size_t data) {
    fs::path p = dir_ / file;
    {
      std::ofstream out(p, std::ios::binary);
      std::uint64_t n = header.size();
      for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
      out << header;
    }
    fs::resize_file(p, 8 + header.size() + data);
  }

  // The tensors of a Llama-architecture model (what its safetensors hold).
  static std::vector<Spec> llama(int layers, std::int64_t hidden, std::int64_t inter,
                                 std::int64_t vocab, std::int64_t kv_dim) {
    std::vector<Spec> t = {{"model.embed_tokens.weight", {vocab, hidden}},
                           {"model.norm.weight", {hidden}},
                           {"lm_head.weight", {vocab, hidden}}};
    for (int i = 0; i < layers; ++i) {
      std::string p = "model.layers." + std::to_string(i) + ".";
      t.push_back({p + "self_attn.q_proj.weight", {hidden, hidden}});
      t.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden}});
      t.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden}});
      t.push_back({p + "self_attn.o_proj.weight", {hidden, hidden}});
      t.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
      t.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
      t.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
      t.push_back({p + "input_layernorm.weight", {hidden}});
      t.push_back({p + "post_attention_layernorm.weight", {hidden}});
    }
    return t;
  }

  fs::path dir_;
};

TEST_F(Checkpoints, Llama2_7B_ShapedIs524288BytesPerFp16Token) {
  config({{"model_type", "llama"},
          {"num_hidden_layers", 32},
          {"hidden_size", 4096},
          {"num_attention_heads", 32},
          {"intermediate_size", 11008},
          {"vocab_size", 32000},
          {"max_position_embeddings", 4096},
          {"torch_dtype", "float16"}});
  auto specs = llama(32, 4096, 11008, 32000, 4096);
  std::vector<Spec> a(specs.begin(), specs.begin() + 150), b(specs.begin() + 150, specs.end());
  std::size_t bytes = shard("model-00001-of-00002.safetensors", a, "F16") +
                      shard("model-00002-of-00002.safetensors", b, "F16");
  model::Checkpoint ck = model::read_checkpoint(dir_.string());
  EXPECT_EQ(ck.file_count, 2u);
  EXPECT_EQ(ck.weights_params, 6'738'415'616u);  // Llama-2-7B's published parameter count
  EXPECT_EQ(ck.weights_bytes, bytes);
  EXPECT_EQ(ck.weights_bytes, 6'738'415'616u * 2);
  model::KvCache kv = model::kv_cache_of(ck.config, 2);
  EXPECT_EQ(kv.bytes_per_token(), 524'288u);  // 32 x 32 x 128 x 2 x 2
  EXPECT_EQ(kv.layers.size(), 32u);
  EXPECT_EQ(kv.bytes_per_token(model::KvKind::kFull), 524'288u);
  // fp8 KV halves it; two ranks split the 32 heads.
  EXPECT_EQ(model::kv_cache_of(ck.config, 1).bytes_per_token(), 262'144u);
  EXPECT_EQ(model::kv_cache_of(ck.config, 2, 2).bytes_per_token(), 262'144u);
  // Two ranks: every matrix split in two, the norms (1-D) whole on each.
  const std::size_t norms = (2 * 32 + 1) * 4096 * 2;
  EXPECT_EQ(ck.weights_per_rank(2), (ck.weights_bytes - norms) / 2 + norms);
  // Served in fp32, every float tensor counts 4 bytes an element.
  EXPECT_EQ(ck.weights_per_rank(1, 4), ck.weights_bytes * 2);
}

TEST_F(Checkpoints, Llama3_8B_ShapedWithEightKvHeadsIs131072Bytes) {
  config({{"model_type", "llama"},
          {"num_hidden_layers", 32},
          {"hidden_size", 4096},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"intermediate_size", 14336},
          {"vocab_size", 128256},
          {"max_position_embeddings", 8192},
          {"torch_dtype", "bfloat16"}});
  shard("model.safetensors", llama(32, 4096, 14336, 128256, 1024));
  model::Checkpoint ck = model::read_checkpoint(dir_.string());
  EXPECT_EQ(ck.weights_params, 8'030'261'248u);  // Llama-3-8B's published count
  EXPECT_EQ(model::kv_cache_of(ck.config, 2).bytes_per_token(), 131'072u);
  // Eight KV heads over 16 ranks: a head is not split, each rank holds one.
  EXPECT_EQ(model::kv_cache_of(ck.config, 2, 16).bytes_per_token(), 32u * 2 * 128 * 2);
  EXPECT_THROW(model::kv_cache_of(ck.config, 2, 3), InvalidInput);
}

TEST_F(Checkpoints, MlaRank512Rope64Over27LayersIs31104Bytes) {
  config({{"model_type", "deepseek_v2"},
          {"num_hidden_layers", 27},
          {"hidden_size", 2048},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 16},
          {"kv_lora_rank", 512},
          {"qk_rope_head_dim", 64},
          {"qk_nope_head_dim", 128},
          {"v_head_dim", 128},
          {"torch_dtype", "bfloat16"}});
  shard("model.safetensors", {{"model.embed_tokens.weight", {102400, 2048}}});
  model::Checkpoint ck = model::read_checkpoint(dir_.string());
  model::KvCache kv = model::kv_cache_of(ck.config, 2);
  EXPECT_EQ(kv.bytes_per_token(), 31'104u);  // 27 x (512 + 64) x 2
  EXPECT_EQ(kv.bytes_per_token(model::KvKind::kLatent), 31'104u);
  // The latent is held whole on every rank.
  EXPECT_EQ(model::kv_cache_of(ck.config, 2, 8).bytes_per_token(), 31'104u);
}

TEST_F(Checkpoints, SlidingWindowsAndMixedLayers) {
  // Mistral-7B-v0.1: every layer slides over 4096 tokens.
  config({{"model_type", "mistral"},
          {"num_hidden_layers", 32},
          {"hidden_size", 4096},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"sliding_window", 4096}});
  model::ModelConfig c = model::read_model_config((dir_ / "config.json").string());
  model::KvCache kv = model::kv_cache_of(c, 2);
  EXPECT_EQ(kv.bytes_per_token(model::KvKind::kSliding), 131'072u);
  // A sequence longer than the window holds the window's blocks (plus the one it straddles).
  EXPECT_EQ(kv.sequence_bytes(32768, 16), (4096 / 16 + 1) * 16 * 131'072u);
  EXPECT_EQ(kv.sequence_bytes(100, 16), 7 * 16 * 131'072u);
  // Qwen2 writes a window it does not use.
  config({{"model_type", "qwen2"},
          {"num_hidden_layers", 28},
          {"hidden_size", 3584},
          {"num_attention_heads", 28},
          {"num_key_value_heads", 4},
          {"sliding_window", 131072},
          {"use_sliding_window", false},
          {"max_window_layers", 28}});
  c = model::read_model_config((dir_ / "config.json").string());
  EXPECT_EQ(model::kv_cache_of(c, 2).bytes_per_token(model::KvKind::kFull), 28u * 4 * 128 * 2 * 2);
  // layer_types mixes them (Gemma-3 style: five sliding, one full).
  json types = json::array();
  for (int i = 0; i < 12; ++i)
    types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  config({{"model_type", "gemma3_text"},
          {"num_hidden_layers", 12},
          {"hidden_size", 1024},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 1},
          {"head_dim", 256},
          {"sliding_window", 512},
          {"layer_types", types}});
  c = model::read_model_config((dir_ / "config.json").string());
  kv = model::kv_cache_of(c, 2);
  EXPECT_EQ(kv.by_kind()[model::KvKind::kFull].first, 2u);
  EXPECT_EQ(kv.by_kind()[model::KvKind::kSliding].first, 10u);
  EXPECT_EQ(kv.sequence_bytes(8192, 16), 2u * 8192 * 1024 + 10u * (512 / 16 + 1) * 16 * 1024);
  // GPT-NeoX names.
  config({{"model_type", "gpt_neox"},
          {"num_hidden_layers", 6},
          {"hidden_size", 512},
          {"num_attention_heads", 8}});
  c = model::read_model_config((dir_ / "config.json").string());
  EXPECT_EQ(model::kv_cache_of(c, 2).bytes_per_token(), 6u * 2 * 512 * 2);
}

TEST_F(Checkpoints, BadFilesAreNamed) {
  auto rejects = [&](const std::string& needle) {
    try {
      model::read_checkpoint(dir_.string());
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rejects("no config.json");
  config({{"model_type", "llama"}, {"num_hidden_layers", 2}, {"hidden_size", 64}});
  shard("model.safetensors", {{"w", {4, 4}}});
  rejects("num_attention_heads");
  config({{"model_type", "llama"},
          {"num_hidden_layers", 2},
          {"hidden_size", 64},
          {"num_attention_heads", 4}});
  fs::remove(dir_ / "model.safetensors");
  rejects("no *.safetensors");
  write_raw("model.safetensors", "{\"w\": {\"dtype\": \"F16\", \"shape\": [4, 4]}}", 32);
  rejects("needs dtype, shape and data_offsets");
  write_raw("model.safetensors",
            "{\"w\": {\"dtype\": \"F16\", \"shape\": [4, 4], \"data_offsets\": [0, 30]}}", 32);
  rejects("dtype F16 x shape gives 32");
  write_raw("model.safetensors",
            "{\"w\": {\"dtype\": \"Q4\", \"shape\": [4, 4], \"data_offsets\": [0, 32]}}", 32);
  rejects("unknown dtype 'Q4'");
  write_raw("model.safetensors",
            "{\"w\": {\"dtype\": \"F16\", \"shape\": [4, 4], \"data_offsets\": [0, 32]}}", 16);
  rejects("run past the data");
  write_raw("model.safetensors", "not json", 0);
  rejects("not JSON");
  { std::ofstream(dir_ / "model.safetensors") << "abc"; }
  rejects("shorter than the 8-byte header length");
  // A FIFO or a device read as a header or a config: refused at once, never read.
  fs::remove(dir_ / "model.safetensors");
  ASSERT_EQ(::mkfifo((dir_ / "model.safetensors").c_str(), 0600), 0);
  rejects("no *.safetensors file");  // the folder's scan takes regular files only
  for (const std::string& path :
       {(dir_ / "model.safetensors").string(), std::string("/dev/zero")}) {
    for (auto read : {+[](const std::string& p) { model::read_safetensors_header(p); },
                      +[](const std::string& p) { model::read_model_config(p); }}) {
      try {
        read(path);
        ADD_FAILURE() << path << " accepted";
      } catch (const InvalidInput& e) {
        EXPECT_NE(std::string(e.what()).find(path + ": is a "), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
