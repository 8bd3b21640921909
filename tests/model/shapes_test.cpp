// Shapes the loader settles where ONNX 1.12's inference stops: pads computed from the input's
// shape (Swin's window padding: Mod, a reversed Slice and a Transpose of the pad pairs, folded
// once the batch is bound) and Einsum outputs (MaxViT's attention), on small graphs of the same
// patterns as torch.onnx writes them.
#include <gtest/gtest.h>

#include <limits>

#include "builder.hpp"
#include "model/complete_shapes.hpp"
#include "modelmem/model/graph.hpp"

namespace modelmem::model {
namespace {

using testing::ModelBuilder;

std::vector<std::int64_t> shape_of(const Graph& g, const char* name) {
  return g.tensors[g.find_tensor(name)].shape;
}

TEST(SettledShapes, WindowPaddingComputedFromTheInputShape) {
  // torchvision's shifted_window_attention: pad_r = (7 - W % 7) % 7, pad_b = (7 - H % 7) % 7,
  // F.pad(x, (0, 0, 0, pad_r, 0, pad_b)) on [B, H, W, C]. Here pad_b is written (-H) mod 7,
  // which is 2 for H = 5 only with the divisor's sign (ONNX Mod, fmod=0), and pad_r is Swin's
  // form for W = 3 (4). torch.onnx turns the torch pad list into ONNX's begins-then-ends by
  // appending zeros, Reshape [-1, 2], a reversed Slice and a Transpose.
  ModelBuilder b;
  b.input("X", {"batch", 5, 3, 4}).output("Y");
  b.ints("i1", {1}).ints("i2", {2}).ints("seven", {7}).ints("zero", {0}).ints("zeros2", {0, 0});
  b.ints("pairs", {-1, 2}).ints("flat", {-1}).ints("s_start", {-1});
  b.ints("s_end", {std::numeric_limits<std::int64_t>::min() + 1}).ints("s_axes", {0});
  b.ints("s_steps", {-1});
  b.node("Shape", {"X"}, {"S"}, "/attn/Shape");
  ModelBuilder::int_attr(b.node("Gather", {"S", "i1"}, {"H"}, "/attn/Gather"), "axis", 0);
  ModelBuilder::int_attr(b.node("Gather", {"S", "i2"}, {"W"}, "/attn/Gather_1"), "axis", 0);
  b.node("Neg", {"H"}, {"negH"}, "/attn/Neg");
  b.node("Mod", {"negH", "seven"}, {"pad_b"}, "/attn/Mod");
  b.node("Mod", {"W", "seven"}, {"Wm"}, "/attn/Mod_1");
  b.node("Sub", {"seven", "Wm"}, {"Wr"}, "/attn/Sub");
  b.node("Mod", {"Wr", "seven"}, {"pad_r"}, "/attn/Mod_2");
  ModelBuilder::int_attr(
      b.node("Concat", {"zero", "zero", "zero", "pad_r", "zero", "pad_b"}, {"P6"}, "/attn/Concat"),
      "axis", 0);
  ModelBuilder::int_attr(b.node("Concat", {"P6", "zeros2"}, {"P8"}, "/attn/Concat_1"), "axis", 0);
  b.node("Reshape", {"P8", "pairs"}, {"P42"}, "/attn/Reshape");
  b.node("Slice", {"P42", "s_start", "s_end", "s_axes", "s_steps"}, {"R"}, "/attn/Slice");
  ModelBuilder::ints_attr(b.node("Transpose", {"R"}, {"T"}, "/attn/Transpose"), "perm", {1, 0});
  b.node("Reshape", {"T", "flat"}, {"pads"}, "/attn/Reshape_1");
  b.node("Pad", {"X", "pads"}, {"Xp"}, "/attn/Pad");
  b.node("Relu", {"Xp"}, {"Y"}, "/attn/Relu");
  LoadOptions o;
  o.dims = {{"batch", 2}};
  const Graph g = b.load(o);
  EXPECT_EQ(shape_of(g, "Xp"), (std::vector<std::int64_t>{2, 7, 7, 4}));
  EXPECT_EQ(shape_of(g, "Y"), (std::vector<std::int64_t>{2, 7, 7, 4}));
}

TEST(SettledShapes, EinsumOutputFromItsInputs) {
  // MaxViT's attention: torch.einsum("B G H I D, B G H J D -> B G H I J", q, k), spaces and
  // all; ONNX 1.12 infers the rank only.
  ModelBuilder b;
  b.input("Q", {"batch", 2, 3, 4, 8}).input("K", {"batch", 2, 3, 5, 8}).output("Y");
  ModelBuilder::string_attr(b.node("Einsum", {"Q", "K"}, {"E"}, "/attn/Einsum"), "equation",
                            "B G H I D, B G H J D -> B G H I J");
  ModelBuilder::int_attr(b.node("Softmax", {"E"}, {"Y"}, "/attn/Softmax"), "axis", -1);
  LoadOptions o;
  o.dims = {{"batch", 3}};
  const Graph g = b.load(o);
  EXPECT_EQ(shape_of(g, "E"), (std::vector<std::int64_t>{3, 2, 3, 4, 5}));
  EXPECT_EQ(shape_of(g, "Y"), (std::vector<std::int64_t>{3, 2, 3, 4, 5}));
  EXPECT_EQ(g.tensors[g.find_tensor("E")].bytes, 3u * 2 * 3 * 4 * 5 * 4);
}

TEST(SettledShapes, EinsumEquations) {
  using detail::einsum_dims;
  using D = std::vector<std::int64_t>;
  EXPECT_EQ(einsum_dims("ij,jk->ik", {{2, 3}, {3, 4}}), D({2, 4}));
  EXPECT_EQ(einsum_dims("ij,jk", {{2, 3}, {3, 4}}), D({2, 4}));  // implicit: letters used once
  EXPECT_EQ(einsum_dims("ba", {{2, 3}}), D({3, 2}));             // in alphabetical order
  EXPECT_EQ(einsum_dims("ii->i", {{5, 5}}), D({5}));
  EXPECT_EQ(einsum_dims("...ij,...jk->...ik", {{3, 1, 2, 4}, {5, 4, 6}}), D({3, 5, 2, 6}));
  EXPECT_EQ(einsum_dims("bij->b", {{7, 2, 3}}), D({7}));
  EXPECT_EQ(einsum_dims("ij,jk->ik", {{2, 3}, {4, 4}}), std::nullopt);  // j: 3 against 4
  EXPECT_EQ(einsum_dims("ij->ik", {{2, 3}}), std::nullopt);             // k is no input's
  EXPECT_EQ(einsum_dims("ij,jk->ik", {{2, 3}}), std::nullopt);          // one operand missing
  EXPECT_EQ(einsum_dims("ijk", {{2, 3}}), std::nullopt);                // rank 2, three letters
  EXPECT_EQ(einsum_dims("i.j", {{2, 3}}), std::nullopt);                // a lone dot
}

TEST(SettledShapes, ChainsOfWindowPaddingSettleInAFewPasses) {
  // Eight stages of Swin's pattern: each pads its input to a multiple of 7 rows with pads
  // computed from the input's shape (Shape, Gather, Mod, Sub, Mod, Concat: values ONNX 1.12's
  // data propagation does not follow), so the next stage's Shape waits for the previous Pad's
  // shape. Each stage used to take a whole-graph inference pass of its own (Swin-B: 29, MaxViT:
  // 68 passes, seconds per plan); the folding walk now infers each node it cannot fold from its
  // own ONNX inference function, and the chain settles in a walk.
  ModelBuilder b;
  constexpr int kStages = 8;
  b.input("X0", {"batch", 5, 3, 4}).output("Y");
  b.ints("i1", {1}).ints("seven", {7}).ints("zero", {0});
  for (int i = 0; i < kStages; ++i) {
    const std::string s = std::to_string(i), x = "X" + s, p = "/stage" + s + "/";
    b.node("Shape", {x}, {"S" + s}, p + "Shape");
    ModelBuilder::int_attr(b.node("Gather", {"S" + s, "i1"}, {"H" + s}, p + "Gather"), "axis", 0);
    b.node("Mod", {"H" + s, "seven"}, {"Hm" + s}, p + "Mod");
    b.node("Sub", {"seven", "Hm" + s}, {"R" + s}, p + "Sub");
    b.node("Mod", {"R" + s, "seven"}, {"pad" + s}, p + "Mod_1");
    ModelBuilder::int_attr(
        b.node("Concat", {"zero", "zero", "zero", "zero", "zero", "pad" + s, "zero", "zero"},
               {"pads" + s}, p + "Concat"),
        "axis", 0);
    b.node("Pad", {x, "pads" + s}, {"P" + s}, p + "Pad");
    // One row more, so that the next stage pads again: Concat with the input's first row.
    b.ints("r0" + s, {0}).ints("r1" + s, {1}).ints("ax" + s, {1});
    b.node("Slice", {x, "r0" + s, "r1" + s, "ax" + s}, {"row" + s}, p + "Slice");
    ModelBuilder::int_attr(
        b.node("Concat", {"P" + s, "row" + s}, {"X" + std::to_string(i + 1)}, p + "Concat_1"),
        "axis", 1);
  }
  b.node("Relu", {"X" + std::to_string(kStages)}, {"Y"}, "/out/Relu");
  LoadOptions o;
  o.dims = {{"batch", 2}};
  const Graph g = b.load(o);
  // Rows: 5 -> 7 + 1 = 8 -> 14 + 1 = 15 -> 21 + 1 = 22 -> ... (7 k + 1 after stage k).
  EXPECT_EQ(shape_of(g, "Y"), (std::vector<std::int64_t>{2, 7 * kStages + 1, 3, 4}));
  EXPECT_LE(g.inference_passes, 3);
}

}  // namespace
}  // namespace modelmem::model
