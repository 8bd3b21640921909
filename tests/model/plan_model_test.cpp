// plan_model() / plan_device() and their renderers: the figures by hand on tiny.onnx, options
// validated before any work, dtype of weights and activations, the text the CLI prints.
#include <gtest/gtest.h>

#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/render.hpp"

namespace modelmem::model {
namespace {

const std::string kModels = std::string(MODELMEM_SOURCE_DIR) + "/models/";

PlanOptions tiny_options() {
  PlanOptions o;
  o.dims = {{"n", 1}};
  o.time_limit = 0.5;
  return o;
}

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

TEST(PlanModel, ChainsAndSizes) {
  EXPECT_EQ(chain_text({"a"}, 4), "a");
  EXPECT_EQ(chain_text({"a", "b", "c", "d"}, 4), "a = b = c = d");
  EXPECT_EQ(chain_text({"a", "b", "c", "d", "e"}, 4), "a = ... = e (5 tensors)");
  EXPECT_EQ(bytes_text(7225344), "7,225,344 B (6.89 MiB)");
  EXPECT_EQ(parse_size("1024", "x"), 1024u);
  EXPECT_EQ(parse_size("16GiB", "x"), std::size_t{16} << 30);
  EXPECT_EQ(parse_size("512MiB", "x"), std::size_t{512} << 20);
  EXPECT_EQ(parse_size("1.5G", "x"), std::size_t{3} << 29);
  EXPECT_EQ(parse_size("80GB", "x"), std::size_t{80} << 30);
  EXPECT_EQ(parse_size("4k", "x"), 4096u);
  EXPECT_THROW(parse_size("0", "x"), InvalidInput);
  EXPECT_THROW(parse_size("", "x"), InvalidInput);
  EXPECT_THROW(parse_size("12 parsecs", "x"), InvalidInput);
  EXPECT_THROW(parse_size("-3G", "x"), InvalidInput);
}

TEST(PlanDevice, NeedsAddUpAndStringsFollowTheFormat) {
  PlanOptions o = tiny_options();
  o.dims["batch"] = 1;
  DevicePlan dp =
      plan_device({kModels + "tiny.onnx", kModels + "resnet50.onnx"}, o, std::size_t{1} << 30);
  ASSERT_EQ(dp.models.size(), 2u);
  EXPECT_EQ(dp.models[0].pool, "tiny");
  EXPECT_EQ(dp.models[1].pool, "resnet50");
  std::size_t quotas = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    const ModelPlan& mp = dp.plans[i];
    EXPECT_EQ(dp.models[i].ideal, mp.weights_bytes + mp.ideal_arena);
    EXPECT_EQ(dp.models[i].eager, mp.weights_bytes + mp.eager_peak);
    EXPECT_EQ(dp.models[i].quota, mp.total());
    quotas += dp.models[i].quota;
  }
  EXPECT_EQ(dp.total_quota, quotas);
  EXPECT_TRUE(dp.fits());
  EXPECT_EQ(dp.headroom(), (1ll << 30) - static_cast<long long>(quotas));
  EXPECT_EQ(dp.config_string(0), "pools:[tiny:1],default_pool:tiny");
  const std::size_t resnet_mib = (dp.models[1].quota + (1u << 20) - 1) >> 20;
  EXPECT_EQ(dp.config_string(1),
            "pools:[resnet50:" + std::to_string(resnet_mib) + "],default_pool:resnet50");
  EXPECT_EQ(dp.config_string_all(), "pools:[tiny:1,resnet50:" + std::to_string(resnet_mib) + "]");
  // The same file twice gets two pools.
  DevicePlan twice = plan_device({kModels + "tiny.onnx", kModels + "tiny.onnx"}, tiny_options(),
                                 std::size_t{1} << 20);
  EXPECT_EQ(twice.models[1].pool, "tiny_2");
  // A dim no model has is an error.
  PlanOptions bad = tiny_options();
  bad.dims["nope"] = 3;
  EXPECT_THROW(plan_device({kModels + "tiny.onnx"}, bad, std::size_t{1} << 30), InvalidInput);
  EXPECT_THROW(plan_device({}, tiny_options(), 1), InvalidInput);
  EXPECT_THROW(plan_device({kModels + "tiny.onnx"}, tiny_options(), 0), InvalidInput);
}

}  // namespace
}  // namespace modelmem::model
