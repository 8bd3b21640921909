// F.scaled_dot_product_attention as torch.onnx spells it, planned as PyTorch 2.x's one CPU
// operator (LifetimeOptions::sdpa), on small models built in memory.
#include <gtest/gtest.h>

#include <string>

#include "builder.hpp"
#include "modelmem/model/lifetimes.hpp"

namespace modelmem::model {
namespace {

using testing::ModelBuilder;

// q, k, v of [1, 4 heads, 128, 16]; the context transposed back and reshaped to [1, 128, 64].
// `both_scaled`: the exporter's spelling (q and k^T each times sqrt(scale)); otherwise the
// written-out form that scales q only.
Graph sdpa_attention(bool both_scaled) {
  ModelBuilder b(17);
  b.input("Q", {1, 4, 128, 16}).input("K", {1, 4, 128, 16}).input("V", {1, 4, 128, 16});
  b.weight("c", {}).ints("shape", {1, 128, 64}).output("Z");
  ModelBuilder::ints_attr(b.node("Transpose", {"K"}, {"KT"}), "perm", {0, 1, 3, 2});
  b.node("Mul", {"Q", "c"}, {"A"});
  if (both_scaled) b.node("Mul", {"KT", "c"}, {"B"});
  b.node("MatMul", {"A", both_scaled ? "B" : "KT"}, {"S"});
  ModelBuilder::int_attr(b.node("Softmax", {"S"}, {"P"}), "axis", -1);
  b.node("MatMul", {"P", "V"}, {"O"});
  ModelBuilder::ints_attr(b.node("Transpose", {"O"}, {"OT"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"OT", "shape"}, {"Z"});
  return b.load();
}

LifetimeOptions sdpa_eager_2x() {
  LifetimeOptions o;
  o.in_place = false;
  o.sdpa = true;
  return o;
}

int sdpa_buffer(const Graph& g, const Lifetimes& lt, const char* name) {
  return lt.buffer_of[g.find_tensor(name)];
}

TEST(Sdpa, TheExportersSpellingIsOneOperatorWithoutScores) {
  Graph g = sdpa_attention(true);
  Lifetimes lt = build_lifetimes(g, sdpa_eager_2x());
  EXPECT_EQ(lt.sdpa, 1u);
  for (const char* t : {"KT", "A", "B", "S", "P"}) EXPECT_EQ(sdpa_buffer(g, lt, t), -1) << t;
  // The output is [b, s, h, d] in memory: the transpose back and the reshape are views.
  EXPECT_EQ(sdpa_buffer(g, lt, "O"), sdpa_buffer(g, lt, "OT"));
  EXPECT_EQ(sdpa_buffer(g, lt, "O"), sdpa_buffer(g, lt, "Z"));
  // The kernel's logsumexp (4 x 128 floats) and one thread's work buffer: qSplit 32 (below
  // 192 queries), kvSplit 128 (the keys), (32 x 128 + 2 x 32 + 32 x 16) floats.
  const std::size_t workspace = 4 * 128 * 4 + (32 * 128 + 2 * 32 + 32 * 16) * 4;
  bool found = false;
  for (const auto& buf : lt.problem.buffers)
    if (buf.id.size() > 5 && buf.id.compare(buf.id.size() - 5, 5, ":sdpa") == 0) {
      EXPECT_EQ(buf.size, workspace);
      found = true;
    }
  EXPECT_TRUE(found);
  // At the operator: q, k, v, the output and the workspace; no 4 x 128 x 128 scores.
  EXPECT_EQ(plan::lower_bound(lt.problem), 4 * 32768u + workspace);
}

TEST(Sdpa, WrittenOutAttentionKeepsItsScores) {
  Graph g = sdpa_attention(false);
  Lifetimes lt = build_lifetimes(g, sdpa_eager_2x());
  EXPECT_EQ(lt.sdpa, 0u);
  EXPECT_GE(sdpa_buffer(g, lt, "S"), 0);
  EXPECT_GE(sdpa_buffer(g, lt, "P"), 0);
  EXPECT_GE(plan::lower_bound(lt.problem), 4 * 128 * 128 * 4u);
}

TEST(Sdpa, OffTheExportIsPlannedAsItIsSpelled) {
  Graph g = sdpa_attention(true);
  LifetimeOptions o = sdpa_eager_2x();
  o.sdpa = false;  // PyTorch 1.13's rules: no SDPA there
  Lifetimes lt = build_lifetimes(g, o);
  EXPECT_EQ(lt.sdpa, 0u);
  EXPECT_GE(sdpa_buffer(g, lt, "S"), 0);
}

}  // namespace
}  // namespace modelmem::model
