// plan_model() and its renderers: the figures by hand on tiny.onnx, options
// validated before any work, dtype of weights and activations, the text the CLI prints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "builder.hpp"
#include "support/bundled_models.hpp"

#include "modelmem/core/error.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/render.hpp"

namespace modelmem::model {
namespace {

using modelmem::testing::kModels, modelmem::testing::tiny_options;

TEST(PlanModel, TinyIdealAndEagerByHand) {
  // tiny.onnx at n=1: X 256 B, A..E 512 B, F and Y 256 B. Static: Relu writes into A, Add into
  // C, Reshape is a view: peak 1,024 B at the residual Add. Eager (nothing in place, the input
  // held by the caller throughout): X, B, C and D are live together at the Add: 1,792 B.
  ModelPlan mp = plan_model(kModels + "tiny.onnx", tiny_options());
  EXPECT_EQ(mp.arena(), 1024u);
  EXPECT_EQ(mp.ideal_arena, 1024u);
  EXPECT_EQ(mp.ideal_lower_bound, 1024u);
  EXPECT_EQ(mp.eager_peak, 1792u);
  EXPECT_EQ(mp.eager_peak_step, 3u);
  EXPECT_EQ(mp.weights_bytes, 106512u);
  EXPECT_EQ(mp.total(), 106512u + 1024u);
  EXPECT_EQ(mp.need(Runtime::kEager), 1792u);

  PlanOptions eager = tiny_options();
  eager.runtime = Runtime::kEager;
  ModelPlan e = plan_model(kModels + "tiny.onnx", eager);
  EXPECT_EQ(e.eager_peak, 1792u);
  EXPECT_EQ(e.arena(), e.eager_arena);
  EXPECT_GE(e.arena(), 1792u);
  EXPECT_EQ(e.ideal_arena, 1024u);
  EXPECT_EQ(e.plan.lifetimes.in_place, 0u);
}

TEST(PlanModel, DtypeScalesWeightsUnlessKept) {
  PlanOptions o = tiny_options();
  o.dtype = "fp16";
  ModelPlan h = plan_model(kModels + "tiny.onnx", o);
  EXPECT_EQ(h.weights_stored_bytes, 106512u);
  // The float32 weights halve; the int64 reshape target (16 B) stays.
  EXPECT_EQ(h.weights_bytes, (106512u - 16u) / 2 + 16u);
  o.keep_weights_dtype = true;
  ModelPlan k = plan_model(kModels + "tiny.onnx", o);
  EXPECT_EQ(k.weights_bytes, 106512u);
  EXPECT_EQ(k.arena(), h.arena());
  std::string text = render_text(h);
  EXPECT_NE(text.find("float32 planned as float16"), std::string::npos) << text;
  EXPECT_EQ(text.find("as stored)"), std::string::npos) << text;
}

std::string write_model(const testing::ModelBuilder& b, const std::string& name) {
  auto path = std::filesystem::temp_directory_path() /
              ("modelmem_plan_model_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << b.bytes();
  return path.string();
}

TEST(PlanModel, AStoredFloat16ModelSaysSo) {
  testing::ModelBuilder b;
  b.input("X", {1, 256}, onnx::TensorProto::FLOAT16)
      .weight("W", {256, 256}, onnx::TensorProto::FLOAT16)
      .output("Z", onnx::TensorProto::FLOAT16);
  b.node("MatMul", {"X", "W"}, {"A"});
  b.node("Relu", {"A"}, {"Z"});
  const std::string path = write_model(b, "fp16.onnx");
  PlanOptions o;
  ModelPlan mp = plan_model(path, o);
  std::string text = render_text(mp);
  EXPECT_NE(text.find("(float16 as stored)"), std::string::npos) << text;
  EXPECT_EQ(text.find("float32"), std::string::npos) << text;
  EXPECT_EQ(mp.weights_bytes, 256u * 256u * 2u);
  o.dtype = "fp16";  // nothing to convert: said, and the figures unchanged
  ModelPlan h = plan_model(path, o);
  EXPECT_NE(render_text(h).find("no float32 activations to convert"), std::string::npos);
  EXPECT_EQ(h.weights_bytes, mp.weights_bytes);
  EXPECT_EQ(h.arena(), mp.arena());
  std::filesystem::remove(path);
}

// One Conv X -> Y (float32, `pad` on every side, `stride`), planned eager with and without the
// convolution's own buffers.
struct ConvCase {
  std::size_t eager_without, eager_with, workspaces;
};
ConvCase plan_conv(std::vector<std::int64_t> x, std::vector<std::int64_t> w, std::int64_t group,
                   std::int64_t pad, std::int64_t stride) {
  testing::ModelBuilder b;
  b.input("X", {x.begin(), x.end()}).weight("W", w).output("Y");
  auto& c = b.node("Conv", {"X", "W"}, {"Y"}, "conv");
  testing::ModelBuilder::int_attr(c, "group", group);
  auto ints = [&](const char* name, std::int64_t v, int count) {
    auto* a = c.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int i = 0; i < count; ++i) a->add_ints(v);
  };
  ints("pads", pad, 4);
  ints("strides", stride, 2);
  const std::string path = write_model(b, "conv.onnx");
  PlanOptions o;
  o.eager_conv_workspace = false;
  ConvCase r;
  r.eager_without = plan_model(path, o).eager_peak;
  o.eager_conv_workspace = true;
  o.runtime = Runtime::kEager;
  ModelPlan e = plan_model(path, o);
  r.eager_with = e.eager_peak;
  r.workspaces = e.plan.lifetimes.workspaces;
  EXPECT_EQ(e.arena(), e.eager_peak);
  std::filesystem::remove(path);
  return r;
}

// The byte counts below are PyTorch 1.13's (one thread, float32), recorded with `modelmem run
// --trace` around one call of torch.nn.Conv2d: the plan counts X and Y, the workspace the rest.
TEST(PlanModel, EagerCountsSlowConvUnfold) {
  // [1,3,56,56] 3x3 -> 24 channels: 9,408 input elements and one group: PyTorch's own kernel,
  // which unfolds the input into 27 x 3,136 floats (338,688 B) for the call.
  ConvCase c = plan_conv({1, 3, 56, 56}, {24, 3, 3, 3}, 1, 1, 1);
  EXPECT_EQ(c.eager_without, 37632u + 301056u);
  EXPECT_EQ(c.eager_with, 37632u + 301056u + 338688u);
  EXPECT_EQ(c.workspaces, 1u);
}

TEST(PlanModel, EagerCountsOneDnnBlockedCopiesPaddedToTheChannelBlock) {
  // Depthwise [1,24,56,56] 3x3: oneDNN copies the input padded to 32 channels (401,408 B), the
  // weights (32 x 9 floats: 1,152 B) and computes into a 32-channel output (401,408 B) before
  // the plain one: 803,968 B above X at once, of which Y's 301,056 are counted already.
  ConvCase d = plan_conv({1, 24, 56, 56}, {24, 1, 3, 3}, 24, 1, 1);
  EXPECT_EQ(d.eager_with, 301056u + 803968u);
  // [1,16,112,112] 3x3 -> 24: the input copy (802,816 B), the weights padded to 32 x 16 x 9
  // (18,432 B) and the blocked output (1,605,632 B); then, the copies freed, the blocked output
  // and the plain one (1,204,224 B), the larger pair.
  ConvCase f = plan_conv({1, 16, 112, 112}, {24, 16, 3, 3}, 1, 1, 1);
  EXPECT_EQ(f.eager_with, 802816u + 1605632u + 1204224u);
  // [1,3,112,112] 3x3 -> 24: fewer than 16 input channels are read in place; then the blocked
  // output and the plain one are live together (1,605,632 + 1,204,224 B).
  ConvCase g = plan_conv({1, 3, 112, 112}, {24, 3, 3, 3}, 1, 1, 1);
  EXPECT_EQ(g.eager_with, 150528u + 1605632u + 1204224u);
}

TEST(PlanModel, EagerCountsStridedOneByOneConvButNotAPlainOne) {
  // [1,64,56,56] 1x1 stride 2 -> 128: oneDNN packs one image's strided input (200,704 B; the
  // recorded request is 200,832), copies the input (802,816) and weights (32,768) and computes
  // into the blocked output (401,408).
  ConvCase s = plan_conv({1, 64, 56, 56}, {128, 64, 1, 1}, 1, 0, 2);
  EXPECT_EQ(s.eager_with, 802816u + 200704u + 802816u + 32768u + 401408u);
  // The same at stride 1 and batch 8 goes to PyTorch's kernel, which reads the input as is.
  ConvCase p = plan_conv({8, 64, 56, 56}, {128, 64, 1, 1}, 1, 0, 1);
  EXPECT_EQ(p.eager_with, p.eager_without);
  EXPECT_EQ(p.workspaces, 0u);
  // At batch 16 oneDNN takes it: input copy, weights, blocked output, then the blocked and the
  // plain output together (6,422,528 B each), the larger set.
  ConvCase q = plan_conv({16, 64, 28, 28}, {128, 64, 1, 1}, 1, 0, 1);
  EXPECT_EQ(q.eager_with, 3211264u + 6422528u + 6422528u);
}

// ConvNeXt-Base's downsampling conv (1024 x 512 x 2 x 2, stride 2) at batch 1, whose input is
// LayerNorm2d's output permuted back from NHWC: PyTorch 1.13 runs it channels-last, copies the
// weights into that layout (8,388,608 B) beside oneDNN's own copy (the same again), makes no
// copy of the input, and computes into a blocked output (200,704 B): recorded, 17,780,736 B
// above what was live before the model's call at that step, which this graph reproduces (the
// NHWC input, its permutation, the output and the workspace).
TEST(PlanModel, EagerCountsTheWeightCopyOfAChannelsLastConv) {
  auto eager = [](bool permuted) {
    testing::ModelBuilder b;
    if (permuted) {
      b.input("X", {1, 14, 14, 512}).weight("W", {1024, 512, 2, 2}).output("Y");
      auto& t = b.node("Transpose", {"X"}, {"T"}, "/norm/Transpose");
      testing::ModelBuilder::ints_attr(t, "perm", {0, 3, 1, 2});
    } else {
      b.input("T", {1, 512, 14, 14}).weight("W", {1024, 512, 2, 2}).output("Y");
    }
    auto& c = b.node("Conv", {"T", "W"}, {"Y"}, "/conv/Conv");
    testing::ModelBuilder::ints_attr(c, "kernel_shape", {2, 2});
    testing::ModelBuilder::ints_attr(c, "strides", {2, 2});
    const std::string path = write_model(b, "conv_nhwc.onnx");
    PlanOptions o;
    o.runtime = Runtime::kEager;
    const std::size_t peak = plan_model(path, o).eager_peak;
    std::filesystem::remove(path);
    return peak;
  };
  EXPECT_EQ(eager(true), 401408u + 401408u + 200704u + 16777216u);
  EXPECT_EQ(eager(true), 17780736u);
  // The same conv on a plain NCHW input: oneDNN's input and weight copies and blocked output.
  EXPECT_EQ(eager(false), 401408u + 200704u + (401408u + 8388608u + 200704u - 200704u));
}

TEST(PlanModel, EagerHoldsAModulesArgumentsUntilItReturns) {
  // torch.onnx names: P is made in module "pre" and passed into module "block"; Python's frame
  // of block.forward holds it to the block's last node. Each tensor is 1 KiB.
  testing::ModelBuilder b;
  b.input("X", {1, 256}).output("Y");
  b.node("Relu", {"X"}, {"P"}, "/pre/Relu");
  b.node("Relu", {"P"}, {"A"}, "/block/a/Relu");
  b.node("Relu", {"A"}, {"B"}, "/block/b/Relu");
  b.node("Relu", {"B"}, {"Y"}, "/block/c/Relu");
  const std::string path = write_model(b, "scopes.onnx");
  PlanOptions o;
  o.eager_module_scopes = false;
  EXPECT_EQ(plan_model(path, o).eager_peak, 3072u);  // X + two neighbours
  o.eager_module_scopes = true;
  EXPECT_EQ(plan_model(path, o).eager_peak, 4096u);  // X + P (held) + two neighbours
  std::filesystem::remove(path);
}

TEST(PlanModel, EagerHoldsAConcatenationAModulePassesToASubModuleUntilItReturns) {
  // DenseNet's layer: `y = torch.cat(xs, 1); return self.b(self.a(y))`. C is made by the module
  // "layer" itself (not by a sub-module) and passed into its sub-module "a": a local of
  // layer.forward, which Python holds until the forward returns, not only until "a" returns.
  // An Add there (`self.a(x + x)`) is a temporary, freed when "a" returns.
  auto peak = [](const std::string& op, bool scopes) {
    testing::ModelBuilder b;
    b.input("X", {1, 128}).output("Y");
    b.node("Relu", {"X"}, {"P"}, "/pre/Relu");
    auto& n = b.node(op, {"P", "P"}, {"C"}, "/layer/" + op);
    if (op == "Concat") testing::ModelBuilder::int_attr(n, "axis", 1);
    b.node("Relu", {"C"}, {"A"}, "/layer/a/Relu");
    b.node("Relu", {"A"}, {"B"}, "/layer/b/Relu");
    b.node("Relu", {"B"}, {"Y"}, "/post/Relu");
    const std::string path = write_model(b, "locals.onnx");
    PlanOptions o;
    o.eager_module_scopes = scopes;
    const std::size_t peak = plan_model(path, o).eager_peak;
    std::filesystem::remove(path);
    return peak;
  };
  // At "b": X and P (layer's argument), 512 B each, C (layer's local), A (b's argument) and B,
  // 1 KiB each.
  EXPECT_EQ(peak("Concat", true), 4096u);
  EXPECT_EQ(peak("Concat", false), 2560u);  // X + two neighbours at "b"
  EXPECT_EQ(peak("Add", true), 2048u);      // X, P and two neighbours, 512 B each
}

TEST(PlanModel, EagerWritesAnActivationAfterAnUnfoldedNormIntoTheNormsOutput) {
  // DenseNet's norm -> relu (inplace=True): R shares N's buffer; a Relu after anything else (Q
  // after R) gets its own, as it stands for the norm output PyTorch allocates after a Conv.
  testing::ModelBuilder b;
  b.input("X", {1, 256}).output("Y");
  for (const char* w : {"s", "bias", "mean", "var"}) b.weight(w, {256});
  b.node("Relu", {"X"}, {"P"}, "/pre/Relu");
  b.node("BatchNormalization", {"P", "s", "bias", "mean", "var"}, {"N"},
         "/norm/BatchNormalization");
  b.node("Relu", {"N"}, {"R"}, "/relu/Relu");
  b.node("Relu", {"R"}, {"Q"}, "/act/Relu");
  b.node("Relu", {"Q"}, {"Y"}, "/post/Relu");
  const Graph g = load_onnx_bytes(b.bytes(), "norm.onnx", "");
  LifetimeOptions o;
  o.in_place = false;
  o.module_scopes = true;
  const int n = g.find_tensor("N"), r = g.find_tensor("R"), q = g.find_tensor("Q");
  Lifetimes plain = build_lifetimes(g, o);
  EXPECT_NE(plain.buffer_of[r], plain.buffer_of[n]);
  o.activation_in_place_after_norm = true;
  Lifetimes shared = build_lifetimes(g, o);
  EXPECT_EQ(shared.buffer_of[r], shared.buffer_of[n]);
  EXPECT_NE(shared.buffer_of[q], shared.buffer_of[r]);
  EXPECT_EQ(shared.problem.buffers.size() + 1, plain.problem.buffers.size());
}

TEST(PlanModel, EagerRunsALeafModuleOfElementwiseNodesAsOneOperator) {
  // nn.SiLU exported as Sigmoid + Mul inside its module "act": PyTorch computes silu in one
  // operator, so S is never allocated. Each tensor is 1 KiB; A is act's argument.
  auto peak = [](const std::string& scope, const std::string& extra_op,
                 const std::string& extra_name = "") {
    testing::ModelBuilder b;
    b.input("X", {1, 256}).output("Y");
    b.node("Relu", {"X"}, {"A"}, "/pre/Relu");
    b.node("Sigmoid", {"A"}, {"S"}, scope + "/Sigmoid");
    b.node("Mul", {"A", "S"}, {"B"}, scope + "/Mul");
    if (!extra_op.empty())
      b.node(extra_op, {"B"}, {"C"}, extra_name.empty() ? scope + "/" + extra_op : extra_name);
    b.node("Relu", {extra_op.empty() ? "B" : "C"}, {"Y"}, "/post/Relu");
    const std::string path = write_model(b, "silu.onnx");
    PlanOptions o;
    ModelPlan mp = plan_model(path, o);
    std::filesystem::remove(path);
    return mp.eager_peak;
  };
  EXPECT_EQ(peak("/act", ""), 3072u);  // X, A, B at the Mul
  // A module with a sub-module is no single operator: S is allocated.
  EXPECT_EQ(peak("/blk", "Relu", "/blk/sub/Relu"), 4096u);  // X, A, S, B at the Mul
  // Nor is a leaf module with a node of another kind (here ReduceMax; a MatMul, a Conv):
  // elementwise ops, ReduceMean, Softmax and layout ops only.
  EXPECT_EQ(peak("/act", "Softmax"), 3072u);
  EXPECT_EQ(peak("/act", "ReduceMax"), 4096u);
}

// PyTorch eager's lifetimes with torch.onnx's module scopes and nn.Linear as one operator.
LifetimeOptions eager_with_modules() {
  LifetimeOptions o;
  o.in_place = false;
  o.inputs_live_throughout = true;
  o.module_scopes = true;
  o.linear_bias_in_place = true;
  return o;
}

TEST(PlanModel, EagerRunsNnLinearAsOneOperatorWithOneOutput) {
  // nn.Linear on a [1, 4, 64] input, exported as MatMul by the weight and Add of the bias in the
  // Linear's own scope "/fc": PyTorch's addmm (or matmul + add_) makes one output, so L shares
  // P's buffer. Each activation is 1 KiB.
  auto lifetimes = [](const std::string& mm_name, const std::string& add_name, bool weight_b,
                      const std::string& extra = "") {
    testing::ModelBuilder b;
    b.input("X", {1, 4, 64}).output("Y").weight("W", {64, 64}).weight("bias", {64});
    if (!weight_b) b.input("K", {64, 64});
    b.node("Relu", {"X"}, {"A"}, "/pre/Relu");
    b.node("MatMul", {"A", weight_b ? "W" : "K"}, {"P"}, mm_name);
    b.node("Add", {"bias", "P"}, {"L"}, add_name);
    b.node("Relu", {"L"}, {"Y"}, extra.empty() ? "/post/Relu" : extra);
    Graph g = load_onnx_bytes(b.bytes(), "linear.onnx", "");
    Lifetimes lt = build_lifetimes(g, eager_with_modules());
    return std::make_pair(lt.buffer_of[g.find_tensor("L")] == lt.buffer_of[g.find_tensor("P")],
                          plan::lower_bound(lt.problem));
  };
  // At the Add: X (the caller's), A (fc's argument, held until fc returns) and P = L.
  EXPECT_EQ(lifetimes("/fc/MatMul", "/fc/Add", true), std::make_pair(true, std::size_t{3072}));
  // `x @ w + b` in a forward with other nodes: two operators, two outputs (X, A, P, L).
  EXPECT_EQ(lifetimes("/blk/MatMul", "/blk/Add", true, "/blk/Relu"),
            std::make_pair(false, std::size_t{4096}));
  // No module names (not torch.onnx's): nothing to tell a Linear by; two outputs.
  EXPECT_EQ(lifetimes("mm", "add", true).first, false);
  // A product by another input (an activation) plus a constant is no Linear.
  EXPECT_EQ(lifetimes("/fc/MatMul", "/fc/Add", false).first, false);
  // plan_model's eager figure uses it; here the bias is an Identity of an initializer, as
  // torch.onnx writes parameters of equal value (ConvNeXt's zero biases).
  testing::ModelBuilder b;
  b.input("X", {1, 4, 64}).weight("W", {64, 64}).weight("bias", {64}).output("Y");
  b.node("Identity", {"bias"}, {"bias_view"}, "Identity_0");
  b.node("Relu", {"X"}, {"A"}, "/pre/Relu");
  b.node("MatMul", {"A", "W"}, {"P"}, "/fc/MatMul");
  b.node("Add", {"P", "bias_view"}, {"L"}, "/fc/Add");
  b.node("Relu", {"L"}, {"Y"}, "/post/Relu");
  const std::string path = write_model(b, "linear.onnx");
  PlanOptions o;
  EXPECT_EQ(plan_model(path, o).eager_peak, 3072u);
  o.eager_module_scopes = false;                     // --no-module-scopes: no modules, no Linear
  EXPECT_EQ(plan_model(path, o).eager_peak, 3072u);  // X, P, L (A dies at the MatMul)
  std::filesystem::remove(path);
}

// A miniature of torchvision's shifted_window_attention (Swin-T's, 1 x 4 x 4 x 16 input, 2 x 2
// windows, 2 heads) in the scope "/blk/attn". One unit U = 1 KiB (the input, x, q, k, v).
testing::ModelBuilder window_attention_model(const std::string& partition_scope) {
  testing::ModelBuilder b;
  b.input("X", {1, 4, 4, 16}).output("Y");
  b.weight("Wqkv", {16, 48}).weight("bqkv", {48}).weight("Wp", {16, 16}).weight("bp", {16});
  b.weight("scale", {});
  b.ints("s_win", {1, 2, 2, 2, 2, 16}).ints("s_x", {4, 4, 16}).ints("s_heads", {4, 4, 3, 2, 8});
  b.ints("s_out", {1, 4, 4, 16});
  b.scalar("i0", 0).scalar("i1", 1).scalar("i2", 2);
  const std::string a = "/blk/attn/";
  auto transpose = [&](const std::string& in, const std::string& out,
                       const std::vector<std::int64_t>& perm, const std::string& name) {
    testing::ModelBuilder::ints_attr(b.node("Transpose", {in}, {out}, name), "perm", perm);
  };
  b.node("Reshape", {"X", "s_win"}, {"R1"}, partition_scope + "Reshape");
  transpose("R1", "T1", {0, 1, 3, 2, 4, 5}, partition_scope + "Transpose");
  b.node("Reshape", {"T1", "s_x"}, {"x"}, partition_scope + "Reshape_1");  // a copy
  b.node("MatMul", {"x", "Wqkv"}, {"P"}, a + "MatMul");
  b.node("Add", {"P", "bqkv"}, {"qkv"}, a + "Add");  // F.linear's bias: in place
  b.node("Reshape", {"qkv", "s_heads"}, {"R2"}, a + "Reshape_2");
  transpose("R2", "T2", {2, 0, 3, 1, 4}, a + "Transpose_1");
  for (int i = 0; i < 3; ++i) {
    auto& g = b.node("Gather", {"T2", "i" + std::to_string(i)}, {std::string(1, "qkv"[i])},
                     a + "Gather_" + std::to_string(i));
    testing::ModelBuilder::int_attr(g, "axis", 0);
  }
  b.node("Mul", {"q", "scale"}, {"qs"}, a + "Mul");  // in qkv's layout: not batch-contiguous
  transpose("k", "kT", {0, 1, 3, 2}, a + "Transpose_2");
  b.node("MatMul", {"qs", "kT"}, {"S"}, a + "MatMul_1");  // copies qs and kT
  b.node("Softmax", {"S"}, {"A"}, a + "Softmax");
  b.node("MatMul", {"A", "v"}, {"O"}, a + "MatMul_2");  // copies v
  transpose("O", "OT", {0, 2, 1, 3}, a + "Transpose_3");
  b.node("Reshape", {"OT", "s_x"}, {"x2"}, a + "Reshape_3");  // a copy, the next x
  b.node("MatMul", {"x2", "Wp"}, {"P2"}, a + "MatMul_3");
  b.node("Add", {"P2", "bp"}, {"y"}, a + "Add_1");
  b.node("Reshape", {"y", "s_out"}, {"Y"}, "/blk/Reshape");
  return b;
}

TEST(PlanModel, EagerFollowsTheLayoutsOfAWindowAttention) {
  auto lifetimes = [](const testing::ModelBuilder& b, bool window) {
    Graph g = b.load();
    LifetimeOptions o = eager_with_modules();
    o.window_attention = window;
    return std::make_pair(std::move(g), build_lifetimes(g, o));
  };
  auto [g, lt] = lifetimes(window_attention_model("/blk/attn/"), true);
  EXPECT_EQ(lt.window_attentions, 1u);
  EXPECT_EQ(lt.matmul_copies, 3u) << "qs, kT and v";
  auto buffer = [&, &g = g, &lt = lt](const char* t) { return lt.buffer_of[g.find_tensor(t)]; };
  // q, k, v and their transposes are views of the qkv projection, which F.linear made in place.
  for (const char* t : {"qkv", "R2", "T2", "q", "k", "v", "kT"}) EXPECT_EQ(buffer(t), buffer("P"));
  EXPECT_NE(buffer("x"), buffer("T1")) << "the partition is a copy";
  EXPECT_NE(buffer("x2"), buffer("OT")) << "so is the attention's output";
  // The partition x lives until the next x is made (a Python local), the projection until v's
  // last use. At q @ k^T: X, x, qkv (3 U), qs, the copies of qs and k, S (0.5 U): 8.5 KiB.
  const auto& x = lt.problem.buffers[buffer("x")];
  EXPECT_EQ(x.end, lt.step_of_node[g.tensors[g.find_tensor("x2")].producer] + 1);
  EXPECT_EQ(plan::lower_bound(lt.problem), 8704u);
  // Without the rule (every Transpose and Gather a copy, no operand copies, x dead after the
  // projection, the bias add a tensor of its own) the peak is 7 KiB, below PyTorch's.
  auto [g0, plain] = lifetimes(window_attention_model("/blk/attn/"), false);
  EXPECT_EQ(plan::lower_bound(plain.problem), 7168u);
  // The partition made in another scope (a module's argument, as nn.MultiheadAttention's
  // projection reads): not this function, nothing changes.
  auto [g1, other] = lifetimes(window_attention_model("/blk/part/"), true);
  EXPECT_EQ(other.window_attentions, 0u);
  auto [g2, other_plain] = lifetimes(window_attention_model("/blk/part/"), false);
  EXPECT_EQ(plan::lower_bound(other.problem), plan::lower_bound(other_plain.problem));
}

TEST(PlanModel, OptionsAreValidatedBeforeLoading) {
  // A model that does not exist: the options' error comes first.
  const std::string missing = "/nonexistent/model.onnx";
  auto rejects = [&](PlanOptions o, const std::string& what) {
    try {
      plan_model(missing, o);
      ADD_FAILURE() << what << ": accepted";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  PlanOptions o = tiny_options();
  o.time_limit = 0;
  rejects(o, "--time-limit");
  o = tiny_options();
  o.keep_weights_dtype = true;
  rejects(o, "--keep-weights-dtype");
  o = tiny_options();
  o.runtime = Runtime::kEager;
  o.in_place = false;
  rejects(o, "--no-in-place");
  o = tiny_options();
  o.lengths_path = "x.txt";
  rejects(o, "--lengths needs --buckets");
  o = tiny_options();
  o.alignment = 0;
  rejects(o, "--align 0");
  // Absurd numbers are refused with their range.
  o = tiny_options();
  o.alignment = 3;
  rejects(o, "--align 3: out of range: a power of two from 1 to 1048576 bytes");
  o = tiny_options();
  o.solver = "nope";
  rejects(o, "--solver nope");
  rejects(tiny_options(), "/nonexistent/model.onnx");
}

TEST(PlanModel, DirectoryIsNamed) {
  try {
    plan_model(kModels, tiny_options());
    ADD_FAILURE() << "a directory was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

TEST(PlanModel, ChainsAndByteTexts) {
  EXPECT_EQ(chain_text({"a"}, 4), "a");
  EXPECT_EQ(chain_text({"a", "b", "c", "d"}, 4), "a = b = c = d");
  EXPECT_EQ(chain_text({"a", "b", "c", "d", "e"}, 4), "a = ... = e (5 tensors)");
  EXPECT_EQ(bytes_text(7225344), "7,225,344 B (6.89 MiB)");
}

}  // namespace
}  // namespace modelmem::model
