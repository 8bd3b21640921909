// In-place and view rules, and the memory-aware order, on small models built in memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "builder.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/order.hpp"

namespace modelmem::model {
namespace {

using testing::ModelBuilder;

int buffer(const Graph& g, const Lifetimes& lt, const char* name) {
  return lt.buffer_of[g.find_tensor(name)];
}

TEST(InPlace, ElementwiseOpWritesIntoItsDyingInput) {
  ModelBuilder b;
  b.input("X", {1, 256}).weight("W", {256, 256}).output("Z");
  b.node("MatMul", {"X", "W"}, {"A"});
  b.node("Relu", {"A"}, {"B"});
  b.node("Sigmoid", {"B"}, {"Z"});
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  EXPECT_EQ(buffer(g, lt, "A"), buffer(g, lt, "B"));
  EXPECT_EQ(buffer(g, lt, "B"), buffer(g, lt, "Z"));
  EXPECT_EQ(lt.in_place, 2u);
  EXPECT_EQ(plan::lower_bound(lt.problem), 2048u);  // X and A at step 0
}

TEST(InPlace, NotWhenTheInputIsStillNeeded) {
  ModelBuilder b;
  b.input("X", {1, 256}).weight("W", {256, 256}).output("Z");
  b.node("MatMul", {"X", "W"}, {"A"});
  b.node("Relu", {"A"}, {"B"});
  b.node("Add", {"A", "B"}, {"Z"});  // A is read after Relu: Relu cannot overwrite it
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  EXPECT_NE(buffer(g, lt, "A"), buffer(g, lt, "B"));
  EXPECT_EQ(buffer(g, lt, "Z"), buffer(g, lt, "A"));  // Add: A dies there, first input
  EXPECT_EQ(lt.in_place, 1u);
}

TEST(InPlace, NotIntoGraphInputsOutputsOrOtherSizes) {
  ModelBuilder b;
  b.input("X", {1, 256}).input("S", {1, 1}).output("Y").output("Z");
  b.node("Relu", {"X"}, {"Y"});      // X is a graph input: the caller's buffer
  b.node("Sigmoid", {"Y"}, {"P"});   // Y is a graph output: it must survive
  b.node("Add", {"S", "P"}, {"Z"});  // broadcast: S is smaller, P dies and has Z's size
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  EXPECT_NE(buffer(g, lt, "Y"), buffer(g, lt, "X"));
  EXPECT_NE(buffer(g, lt, "P"), buffer(g, lt, "Y"));
  EXPECT_EQ(buffer(g, lt, "Z"), buffer(g, lt, "P"));
  EXPECT_NE(buffer(g, lt, "Z"), buffer(g, lt, "S"));
}

TEST(InPlace, NotAcrossTypes) {
  ModelBuilder b;
  b.input("X", {4, 64}, onnx::TensorProto::INT32).output("Y");
  b.node("Relu", {"X"}, {"R"});  // int32 Relu
  auto& cast = b.node("Cast", {"R"}, {"C"});
  ModelBuilder::int_attr(cast, "to", onnx::TensorProto::FLOAT);
  b.node("Neg", {"C"}, {"Y"});
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  EXPECT_NE(buffer(g, lt, "C"), buffer(g, lt, "R"));  // Cast is no in-place op, and types differ
  EXPECT_EQ(buffer(g, lt, "Y"), buffer(g, lt, "C"));
}

TEST(Alias, ViewsShareMemoryAndExtendItsLife) {
  ModelBuilder b;
  b.input("X", {2, 128}).weight("W", {256, 64}).ints("flat", {1, 256}).output("Y");
  b.node("Relu", {"X"}, {"A"});
  b.node("Reshape", {"A", "flat"}, {"V"});  // view of A
  b.node("Relu", {"A"}, {"B"});             // A still read by V's users? no: V is a view
  b.node("MatMul", {"V", "W"}, {"Y"});
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  EXPECT_EQ(buffer(g, lt, "V"), buffer(g, lt, "A"));
  EXPECT_EQ(lt.aliases, 1u);
  // B may not overwrite A: the view V is read at step 3.
  EXPECT_NE(buffer(g, lt, "B"), buffer(g, lt, "A"));
  const auto& a = lt.problem.buffers[buffer(g, lt, "A")];
  EXPECT_EQ(a.start, 0);
  EXPECT_EQ(a.end, 4);
}

TEST(Alias, AllViewOpsAndViewsOfWeights) {
  ModelBuilder b;
  b.input("X", {1, 4, 8}).weight("W", {4, 8}).ints("axes", {0}).output("Y");
  b.node("Flatten", {"X"}, {"F"});
  b.node("Identity", {"F"}, {"I"});
  b.node("Unsqueeze", {"I", "axes"}, {"U"});
  b.node("Squeeze", {"U", "axes"}, {"S"});
  b.node("Identity", {"W"}, {"WV"});  // a view of a weight: no arena memory
  b.node("Reshape", {"WV", "shape"}, {"WR"});
  b.ints("shape", {1, 32});
  b.node("Add", {"S", "WR"}, {"Y"});
  Graph g = b.load();
  Lifetimes lt = build_lifetimes(g);
  int x = buffer(g, lt, "X");
  for (const char* t : {"F", "I", "U", "S"}) EXPECT_EQ(buffer(g, lt, t), x) << t;
  EXPECT_EQ(buffer(g, lt, "WV"), -1);
  EXPECT_EQ(buffer(g, lt, "WR"), -1);
  EXPECT_EQ(lt.weight_views, 2u);
  EXPECT_EQ(lt.aliases, 4u);
  LifetimeOptions off;
  off.alias = false;
  Lifetimes lt2 = build_lifetimes(g, off);
  EXPECT_NE(lt2.buffer_of[g.find_tensor("F")], lt2.buffer_of[g.find_tensor("X")]);
}

// Two branches that each expand X into a large temporary and reduce it again. The stored order
// runs both expansions first (peak: X + 2 large); running each branch to its end first keeps
// only one large tensor live.
ModelBuilder two_branches() {
  ModelBuilder b;
  b.input("X", {1, 64}).weight("Wa", {64, 1024}).weight("Wb", {64, 1024});
  b.weight("Ra", {1024, 64}).weight("Rb", {1024, 64}).output("Y");
  b.node("MatMul", {"X", "Wa"}, {"big_a"});
  b.node("MatMul", {"X", "Wb"}, {"big_b"});
  b.node("MatMul", {"big_a", "Ra"}, {"small_a"});
  b.node("MatMul", {"big_b", "Rb"}, {"small_b"});
  b.node("Add", {"small_a", "small_b"}, {"Y"});
  return b;
}

TEST(MemoryOrder, FindsTheLowerPeak) {
  Graph g = two_branches().load();
  OrderResult r = memory_order(g, {});
  EXPECT_EQ(r.stored_peak, 256u + 4096u + 4096u);
  EXPECT_EQ(r.peak, 256u + 4096u + 256u);  // X, one large, one small
  EXPECT_TRUE(r.exact);
  LifetimeOptions o;
  o.order = r.order;
  EXPECT_EQ(plan::lower_bound(build_lifetimes(g, o).problem), r.peak);
}

TEST(MemoryOrder, BeamSearchAlsoImprovesAndNeverWorsens) {
  Graph g = two_branches().load();
  OrderOptions opt;
  opt.exact_max_nodes = 0;  // force the heuristic
  OrderResult r = memory_order(g, {}, opt);
  EXPECT_FALSE(r.exact);
  EXPECT_LE(r.peak, r.stored_peak);
  EXPECT_EQ(r.peak, 256u + 4096u + 256u);
}

TEST(MemoryOrder, RejectsAnOrderThatIsNotTopological) {
  Graph g = two_branches().load();
  LifetimeOptions o;
  o.order = {2, 0, 1, 3, 4};
  EXPECT_THROW(build_lifetimes(g, o), InvalidInput);
  o.order = {0, 0, 1, 2, 3};
  EXPECT_THROW(build_lifetimes(g, o), InvalidInput);
}

// Random small DAGs: the exact order search must match the best of all topological orders,
// each measured by build_lifetimes (so the search's own memory model is checked too).
TEST(MemoryOrder, ExactMatchesBruteForceOnRandomGraphs) {
  std::mt19937 rng(7);
  const std::int64_t widths[] = {64, 128, 512};
  for (int round = 0; round < 40; ++round) {
    ModelBuilder b;
    b.input("X", {1, 64});
    std::vector<std::pair<std::string, std::int64_t>> tensors = {{"X", 64}};
    const int n = 4 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      std::string out = "t" + std::to_string(i);
      auto [in, w] = tensors[rng() % tensors.size()];
      switch (rng() % 4) {
        case 0: {
          std::int64_t nw = widths[rng() % 3];
          std::string wname = "W" + std::to_string(i);
          b.weight(wname, {w, nw});
          b.node("MatMul", {in, wname}, {out});
          w = nw;
          break;
        }
        case 1:
          b.node("Relu", {in}, {out});
          break;
        case 2: {
          std::vector<std::string> same;
          for (auto& [name, tw] : tensors)
            if (tw == w) same.push_back(name);
          b.node("Add", {in, same[rng() % same.size()]}, {out});
          break;
        }
        default:
          b.node("Identity", {in}, {out});
      }
      tensors.emplace_back(out, w);
    }
    b.output(tensors.back().first);
    Graph g = b.load();
    std::vector<int> order(g.nodes.size());
    std::iota(order.begin(), order.end(), 0);
    std::size_t best = SIZE_MAX;
    do {
      LifetimeOptions o;
      o.order = order;
      try {
        best = std::min(best, plan::lower_bound(build_lifetimes(g, o).problem));
      } catch (const InvalidInput&) {  // not topological
      }
    } while (std::next_permutation(order.begin(), order.end()));
    OrderResult r = memory_order(g, {});
    EXPECT_TRUE(r.exact) << round;
    EXPECT_EQ(r.peak, best) << "round " << round;
    LifetimeOptions o;
    o.order = r.order;
    EXPECT_EQ(plan::lower_bound(build_lifetimes(g, o).problem), r.peak) << round;
  }
}

}  // namespace
}  // namespace modelmem::model
