// The tiny model (models/tiny.onnx, made by models/make_models.py), checked against numbers
// worked out by hand. Seven nodes, X is [n, 64] float32; with n = 1 and 64-byte alignment:
//
//   step node      output  bytes  memory
//   0    mm1       A       512    new buffer A             (X: graph input, 256 B, dies here)
//   1    relu      B       512    in place into A          (A dies at 1)
//   2    mm2       C       512    new buffer C
//   3    residual  D       512    in place into C          (C and B die at 3; C is the first input)
//   4    reshape   E       512    view of D (buffer C)
//   5    mm3       F       256    new buffer F             (E dies at 5)
//   6    softmax   Y       256    new buffer Y             (Softmax is not in place; Y is output)
//
// Buffers [start, end): X [0,1) 256, A [0,4) 512, C [2,6) 512, F [5,7) 256, Y [6,7) 256.
// Live per step: 768, 512, 1024, 1024, 512, 768, 512 -> lower bound 1024 at step 2 (A and C).
// Every activation its own memory: X 256 + A..E 5 x 512 + F 256 + Y 256 = 3328.
// Weights: W1 64x128x4 = 32768, W2 128x128x4 = 65536, W3 64x32x4 = 8192, shape 2x8 = 16 -> 106512.
#include <gtest/gtest.h>

#include "modelmem/core/error.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/order.hpp"

namespace modelmem::model {
namespace {

const std::string kTiny = std::string(MODELMEM_SOURCE_DIR) + "/models/tiny.onnx";

Graph tiny(std::int64_t n = 1) {
  return load_onnx(kTiny, LoadOptions{{{"n", n}}});
}

struct Expect {
  const char* id;
  std::size_t size;
  plan::Time start, end;
};

TEST(Tiny, LifetimesMatchHandComputation) {
  Graph g = tiny();
  ASSERT_EQ(g.nodes.size(), 7u);
  Lifetimes lt = build_lifetimes(g);
  const Expect expect[] = {
      {"X", 256, 0, 1}, {"A", 512, 0, 4}, {"C", 512, 2, 6}, {"F", 256, 5, 7}, {"Y", 256, 6, 7}};
  ASSERT_EQ(lt.problem.buffers.size(), 5u);
  for (const auto& e : expect) {
    auto it = std::find_if(lt.problem.buffers.begin(), lt.problem.buffers.end(),
                           [&](const plan::Buffer& b) { return b.id == e.id; });
    ASSERT_NE(it, lt.problem.buffers.end()) << e.id;
    EXPECT_EQ(it->size, e.size) << e.id;
    EXPECT_EQ(it->start, e.start) << e.id;
    EXPECT_EQ(it->end, e.end) << e.id;
  }
  EXPECT_EQ(lt.weights_bytes, 106512u);
  EXPECT_EQ(lt.weights_count, 4u);
  EXPECT_EQ(lt.activation_bytes_unshared, 3328u);
  EXPECT_EQ(lt.activation_count, 8u);
  EXPECT_EQ(lt.in_place, 2u);
  EXPECT_EQ(lt.aliases, 1u);
  EXPECT_EQ(lt.buffer_of[g.find_tensor("B")], lt.buffer_of[g.find_tensor("A")]);
  EXPECT_EQ(lt.buffer_of[g.find_tensor("E")], lt.buffer_of[g.find_tensor("C")]);
  EXPECT_EQ(plan::lower_bound(lt.problem), 1024u);
  plan::Peak p = plan::peak(lt.problem);
  EXPECT_EQ(p.step, 2);
  ASSERT_EQ(p.live.size(), 2u);
}

TEST(Tiny, BatchScalesActivationsNotWeights) {
  Lifetimes lt = build_lifetimes(tiny(4));
  EXPECT_EQ(plan::lower_bound(lt.problem), 4096u);  // A and C, 4 x 512 each
  EXPECT_EQ(lt.weights_bytes, 106512u);
}

TEST(Tiny, HalfPrecisionHalvesFloatActivations) {
  Graph g = tiny();
  LifetimeOptions o;
  o.float_bytes = 2;
  Lifetimes lt = build_lifetimes(g, o);
  EXPECT_EQ(plan::lower_bound(lt.problem), 512u);
  EXPECT_EQ(lt.activation_bytes_unshared, 1664u);
  EXPECT_EQ(lt.weights_bytes, 106512u);  // weights keep their stored precision
}

TEST(Tiny, WithoutReuseEveryTensorHasItsOwnBuffer) {
  LifetimeOptions o;
  o.in_place = false;
  o.alias = false;
  Lifetimes lt = build_lifetimes(tiny(), o);
  EXPECT_EQ(lt.problem.buffers.size(), 8u);
  // Step 3 holds B [1,4), C [2,4), D [3,5): 1536; step 4: D, E: 1024.
  EXPECT_EQ(plan::lower_bound(lt.problem), 1536u);
}

TEST(Tiny, ChainHasOneOrderAndTheExactSearchKeepsIt) {
  Graph g = tiny();
  OrderResult r = memory_order(g, {});
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.stored_peak, 1024u);
  EXPECT_EQ(r.peak, 1024u);
  EXPECT_EQ(r.order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(Tiny, UnboundDimIsAnError) {
  try {
    load_onnx(kTiny);
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("'n' is not bound"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("graph input 'X'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelmem::model
