// GGUF files read without their weights (model/gguf.hpp): every metadata value type, tensor
// bytes of quantised ggml types, the mapping to a model config, and hostile files refused with
// one line each; llama.cpp's KV cache arithmetic (sizing/engine_llamacpp.hpp) on known shapes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "modelmem/core/error.hpp"
#include "modelmem/model/gguf.hpp"
#include "sizing/engine_llamacpp.hpp"

namespace fs = std::filesystem;
using namespace modelmem;

namespace {

// Little-endian GGUF bytes, built field by field.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& v) {
    put<std::uint64_t>(v.size());
    s += v;
    return *this;
  }
  Bytes& kv_u32(const std::string& k, std::uint32_t v) {
    return str(k).put<std::uint32_t>(4).put<std::uint32_t>(v);
  }
  Bytes& kv_str(const std::string& k, const std::string& v) {
    return str(k).put<std::uint32_t>(8).str(v);
  }
  Bytes& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
                std::uint64_t offset) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) put<std::uint64_t>(d);
    return put<std::uint32_t>(type).put<std::uint64_t>(offset);
  }
};

// A Llama-shaped header: its metadata pairs (all 13 value types among them), then `tensors`.
Bytes header(std::uint64_t n_tensors, const std::function<void(Bytes&)>& tensors,
             std::uint64_t extra_kv = 0, const std::function<void(Bytes&)>& more = nullptr) {
  Bytes b;
  b.s = "GGUF";
  b.put<std::uint32_t>(3).put<std::uint64_t>(n_tensors).put<std::uint64_t>(16 + extra_kv);
  b.kv_str("general.architecture", "llama");
  b.kv_u32("llama.block_count", 2);
  b.kv_u32("llama.embedding_length", 256);
  b.kv_u32("llama.attention.head_count", 8);
  b.kv_u32("llama.attention.head_count_kv", 2);
  b.kv_u32("llama.context_length", 2048);
  b.str("llama.feed_forward_length").put<std::uint32_t>(10).put<std::uint64_t>(512);  // u64
  b.str("t.u8").put<std::uint32_t>(0).put<std::uint8_t>(7);
  b.str("t.i8").put<std::uint32_t>(1).put<std::int8_t>(-7);
  b.str("t.u16").put<std::uint32_t>(2).put<std::uint16_t>(7);
  b.str("t.i16").put<std::uint32_t>(3).put<std::int16_t>(-7);
  b.str("t.i32").put<std::uint32_t>(5).put<std::int32_t>(-7);
  b.str("t.f32").put<std::uint32_t>(6).put<float>(0.5f);
  b.str("t.bool").put<std::uint32_t>(7).put<std::uint8_t>(1);
  b.str("t.i64_f64")
      .put<std::uint32_t>(9)
      .put<std::uint32_t>(11)
      .put<std::uint64_t>(1)
      .put<std::int64_t>(-3);  // an array of one int64
  b.str("tokenizer.ggml.tokens").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(3);
  b.str("a").str("bc").str("");
  if (more) more(b);
  tensors(b);
  return b;
}

class Gguf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("modelmem_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The header, padded to 32, then `data` bytes (a hole).
  std::string write(const Bytes& b, std::uint64_t data, const std::string& name = "m.gguf") {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << b.s;
    fs::resize_file(p, (b.s.size() + 31) / 32 * 32 + data);
    return p.string();
  }
  void refused(const Bytes& b, std::uint64_t data, const std::string& why) {
    const std::string p = write(b, data);
    try {
      model::read_gguf(p);
      FAIL() << "accepted; expected: " << why;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
};

TEST_F(Gguf, ReadsMetadataTensorsAndQuantisedBytes) {
  // f16 [256 x 64]; q4_K [256 x 8]: 8 blocks of 144; q8_0 [64 x 3]: 6 blocks of 34.
  const Bytes b = header(3, [](Bytes& t) {
    t.tensor("token_embd.weight", {256, 64}, 1, 0);
    t.tensor("blk.0.ffn_up.weight", {256, 8}, 12, 32768);
    t.tensor("blk.0.attn_k.weight", {64, 3}, 8, 32768 + 1152);
  });
  const std::string p = write(b, 32768 + 1152 + 204);
  const model::GgufFile f = model::read_gguf(p);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.tensor_bytes, 32768u + 1152u + 204u);
  EXPECT_EQ(f.integer("t.i8"), -7);
  EXPECT_EQ(f.integer("t.bool"), 1);
  EXPECT_EQ(f.integer("t.i64_f64"), -3);
  EXPECT_DOUBLE_EQ(f.metadata.at("t.f32").number, 0.5);
  EXPECT_EQ(f.metadata.at("tokenizer.ggml.tokens").count, 3u);
  const model::Checkpoint ck = model::checkpoint_of_gguf(f);
  EXPECT_EQ(ck.weights_bytes, 32768u + 1152u + 204u);
  EXPECT_EQ(ck.tensors[1].dtype, "Q4_K");
  EXPECT_EQ(ck.tensors[1].shape, (std::vector<std::int64_t>{8, 256}));
  EXPECT_EQ(ck.config.layers, 2);
  EXPECT_EQ(ck.config.kv_heads, 2);
  EXPECT_EQ(ck.config.head_dim, 32);
  EXPECT_EQ(ck.config.intermediate, 512);
  EXPECT_EQ(ck.config.vocab, 3);
  EXPECT_EQ(ck.config.max_positions, 2048);
  EXPECT_EQ(ck.config.max_positions_source, "llama.context_length 2048");
  // Quantised tensors are kept as stored, split by bytes over tensor-parallel ranks.
  EXPECT_EQ(ck.weights_per_rank(1), ck.weights_bytes);
  EXPECT_EQ(ck.tensor_bytes_per_rank(2)[1], 576u);
  EXPECT_TRUE(model::is_gguf_path(p));
}

TEST_F(Gguf, HostileFilesAreRefusedWithOneLine) {
  auto none = [](Bytes&) {};
  Bytes magic = header(0, none);
  magic.s[0] = 'X';
  refused(magic, 0, "not a GGUF file");
  Bytes v1 = header(0, none);
  v1.s[4] = 1;
  refused(v1, 0, "GGUF version 1");
  Bytes many_kv = header(0, none);
  std::memset(&many_kv.s[16], 0x7f, 8);
  refused(many_kv, 0, "metadata pairs cannot fit");
  Bytes many_t = header(0, none);
  std::memset(&many_t.s[8], 0x7f, 8);
  refused(many_t, 0, "tensor infos cannot fit");
  refused(header(0, none, 1, [](Bytes& b) { b.put<std::uint64_t>(1ull << 60); }), 0,
          "runs past the end of the file");
  refused(header(0, none, 1,
                 [](Bytes& b) {
                   b.str("arr").put<std::uint32_t>(9).put<std::uint32_t>(4).put<std::uint64_t>(
                       1ull << 40);
                 }),
          0, "an array of 1099511627776 elements cannot fit");
  refused(header(0, none, 1, [](Bytes& b) { b.str("x").put<std::uint32_t>(13).put<int>(0); }), 0,
          "unknown value type 13");
  refused(header(0, none, 1,
                 [](Bytes& b) { b.str("llama.block_count").put<std::uint32_t>(4).put<int>(0); }),
          0, "appears twice");
  refused(header(1, [](Bytes& t) { t.tensor("w", {32}, 4, 0); }), 64, "unknown ggml type 4");
  refused(header(1,
                 [](Bytes& t) {
                   t.tensor("w", {100, 2}, 12, 0);
                 }),
          1 << 12, "not whole Q4_K blocks of 256");
  refused(header(1, [](Bytes& t) { t.tensor("w", {32}, 0, 4); }), 256,
          "not a multiple of the "
          "alignment 32");
  refused(header(1, [](Bytes& t) { t.tensor("w", {1024}, 0, 0); }), 100, "run past the data");
  refused(header(2,
                 [](Bytes& t) {
                   t.tensor("a", {64}, 0, 0);
                   t.tensor("b", {64}, 0, 128);
                 }),
          512, "overlap");
  refused(header(1,
                 [](Bytes& t) {
                   t.tensor("w", {1, 1, 1, 1, 1}, 0, 0);
                 }),
          64, "n_dims 5 is not 1 to 4");
  // Dims whose product overflows, and a name twice: each named by its tensor.
  refused(header(1,
                 [](Bytes& t) {
                   t.tensor("blk.0.ffn_up.weight", {1ull << 32, 1ull << 32, 2}, 0, 0);
                 }),
          64, "tensor 'blk.0.ffn_up.weight': its 3 dims multiply past 64 bits");
  refused(header(1,
                 [](Bytes& t) {
                   t.tensor("w", {1ull << 60, 8}, 1, 0);
                 }),
          64, "tensor 'w': its size in bytes (9223372036854775808 elements of F16) overflows");
  refused(header(2,
                 [](Bytes& t) {
                   t.tensor("output.weight", {32}, 0, 0);
                   t.tensor("output.weight", {32}, 0, 128);
                 }),
          512, "tensor 'output.weight': the name appears twice");
  refused(header(0, none, 1,
                 [](Bytes& b) {
                   b.str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(3);
                 }),
          0, "general.alignment 3");
  // Truncated in the middle of the metadata.
  Bytes cut = header(0, none);
  cut.s.resize(60);
  const fs::path p = dir_ / "cut.gguf";
  std::ofstream(p, std::ios::binary) << cut.s;
  EXPECT_THROW(model::read_gguf(p.string()), InvalidInput);
  // Not regular files.
  ASSERT_EQ(::mkfifo((dir_ / "fifo.gguf").c_str(), 0600), 0);
  EXPECT_THROW(model::read_gguf((dir_ / "fifo.gguf").string()), InvalidInput);
  EXPECT_THROW(model::read_gguf(dir_.string()), InvalidInput);
  EXPECT_THROW(model::read_gguf((dir_ / "absent.gguf").string()), InvalidInput);
}

TEST_F(Gguf, TypeTableIsGgmls) {
  // Spot checks against ggml-common.h's static_asserts; test_llamacpp.py checks every type
  // against the gguf package's GGML_QUANT_SIZES.
  EXPECT_EQ(model::ggml_type(8)->type_size, 34u);
  EXPECT_EQ(model::ggml_type(12)->type_size, 144u);
  EXPECT_EQ(model::ggml_type(14)->type_size, 210u);
  EXPECT_EQ(model::ggml_type(9)->type_size, 36u);
  EXPECT_EQ(model::ggml_type(4), nullptr);
  EXPECT_EQ(model::ggml_type_named("q4_k")->id, 12u);
  EXPECT_EQ(sizing::ggml_print_name(*model::ggml_type(12)), "q4_K");
  EXPECT_EQ(sizing::ggml_print_name(*model::ggml_type(8)), "q8_0");
}

model::KvCache llama_kv(int layers, std::size_t per_token, std::int64_t window = 0) {
  model::KvCache kv;
  kv.element_size = 2;
  for (int i = 0; i < layers; ++i) {
    model::KvLayer l;
    l.name = "layer " + std::to_string(i);
    l.bytes_per_token = per_token;
    if (window && i % 2 == 0) {
      l.kind = model::KvKind::kSliding;
      l.window = window;
    }
    kv.layers.push_back(l);
  }
  return kv;
}

TEST(LlamaCppKv, CellsRoundedAndRowsOfTheCacheType) {
  // 4 layers of 2 KV heads x 32: 64 K and 64 V elements a token, 256 f16 bytes.
  const model::KvCache kv = llama_kv(4, 256);
  sizing::LlamaCppShape s;
  s.type_k = s.type_v = model::ggml_type_named("f16");
  s.n_ctx = 600;
  s.n_seq = 3;
  std::string why;
  auto r = sizing::llamacpp_kv(kv, s, why);
  ASSERT_TRUE(r) << why;
  // -c 600 -> 768 cells; 768 / 3 = 256 a sequence.
  EXPECT_EQ(r->n_ctx, 768);
  EXPECT_EQ(r->n_ctx_seq, 256);
  EXPECT_EQ(r->k_bytes, 4u * 128 * 256 * 3);
  EXPECT_EQ(r->bytes(), 4u * 256 * 256 * 3);
  // 1000 over 3: 1024 -> 341 -> 512 a sequence, 1536 in all.
  s.n_ctx = 1000;
  r = sizing::llamacpp_kv(kv, s, why);
  EXPECT_EQ(r->n_ctx, 1536);
  EXPECT_EQ(r->n_ctx_seq, 512);
  // q8_0: a row of 64 is two blocks of 34 bytes.
  s.type_k = s.type_v = model::ggml_type_named("q8_0");
  s.n_ctx = 768;
  r = sizing::llamacpp_kv(kv, s, why);
  EXPECT_EQ(r->k_bytes, 4u * 68 * 256 * 3);
  // Unified: one stream of all cells.
  s.unified = true;
  r = sizing::llamacpp_kv(kv, s, why);
  EXPECT_EQ(r->streams, 1);
  EXPECT_EQ(r->cells, 768);
  EXPECT_EQ(r->k_bytes, 4u * 68 * 768);
  // A row that is not whole q4_0 blocks... 48 elements a head row is refused with the reason.
  s.type_k = model::ggml_type_named("q4_0");
  auto odd = sizing::llamacpp_kv(llama_kv(1, 2 * 48 * 2), s, why);
  EXPECT_FALSE(odd);
  EXPECT_NE(why.find("not whole Q4_0 blocks"), std::string::npos) << why;
}

TEST(LlamaCppKv, SlidingLayersKeepWindowPlusMicroBatch) {
  const model::KvCache kv = llama_kv(4, 256, 300);
  sizing::LlamaCppShape s;
  s.type_k = s.type_v = model::ggml_type_named("f16");
  s.n_ctx = 4096;
  s.n_seq = 2;
  s.n_ubatch = 512;
  std::string why;
  auto r = sizing::llamacpp_kv(kv, s, why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(r->cells, 2048);
  EXPECT_EQ(r->swa_cells, 1024);  // 300 + 512 = 812 -> 1024
  EXPECT_EQ(r->swa_layers, 2u);
  EXPECT_EQ(r->swa_k_bytes, 2u * 128 * 1024 * 2);
  EXPECT_EQ(r->k_bytes, 2u * 128 * 2048 * 2);
}

TEST(LlamaCppKv, LogLineAsLlamaCppPrintsIt) {
  const model::GgmlType& f16 = *model::ggml_type_named("f16");
  EXPECT_EQ(sizing::llamacpp_log_line(3u << 20, 3u << 20, 768, 4, 3, 3, f16, f16),
            "llama_kv_cache: size =    6.00 MiB (   768 cells,   4 layers,  3/3 seqs), K (f16):"
            "    3.00 MiB, V (f16):    3.00 MiB");
}

}  // namespace
