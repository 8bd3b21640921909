// plan_model() / plan_device() and their renderers: the figures by hand on tiny.onnx, options
// validated before any work, dtype of weights and activations, the text the CLI prints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "builder.hpp"

#include "modelmem/config/config.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
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

TEST(PlanModel, EagerCountsConvolutionCopies) {
  // X [1,4,8,8] float32 = 1 KiB, W1 [4,4,3,3] = 576 B. Plain eager: X is held by the caller,
  // at the Relu X + A + B = 3 KiB. With the copies, the 3x3 Conv's step holds X + A + a copy of
  // X and of W1 (1,600 B, a multiple of 64): 3,648 B. The 1x1 Conv makes none.
  testing::ModelBuilder b;
  b.input("X", {1, 4, 8, 8}).weight("W1", {4, 4, 3, 3}).weight("W2", {4, 4, 1, 1}).output("Y");
  auto& c1 = b.node("Conv", {"X", "W1"}, {"A"}, "c1");
  auto* pads = c1.add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  b.node("Relu", {"A"}, {"B"}, "relu");
  b.node("Conv", {"B", "W2"}, {"Y"}, "c2");
  const std::string path = write_model(b, "conv.onnx");
  PlanOptions o;
  o.eager_conv_workspace = false;
  EXPECT_EQ(plan_model(path, o).eager_peak, 3072u);
  o.eager_conv_workspace = true;
  ModelPlan w = plan_model(path, o);
  EXPECT_EQ(w.eager_peak, 1024u + 1024u + 1600u);
  EXPECT_EQ(w.eager_peak_step, 0u);
  EXPECT_EQ(w.plan.lifetimes.workspaces, 0u);  // the static plan has none
  o.runtime = Runtime::kEager;
  ModelPlan e = plan_model(path, o);
  EXPECT_EQ(e.plan.lifetimes.workspaces, 1u);
  EXPECT_EQ(e.arena(), e.eager_peak);
  std::filesystem::remove(path);
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
  o.safety = 1e12;
  rejects(o, "--safety 1000000000000: out of range: a factor from 1 to 100");
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
  EXPECT_EQ(parse_size("1.5GiB", "x"), std::size_t{3} << 29);
  // A unit means what it says: GB is 10^9 bytes, GiB 2^30; a bare G says neither.
  EXPECT_EQ(parse_size("80GB", "x"), std::size_t{80'000'000'000});
  EXPECT_EQ(parse_size("16 gb", "x"), std::size_t{16'000'000'000});
  EXPECT_EQ(parse_size("4KiB", "x"), 4096u);
  EXPECT_EQ(parse_size("4kB", "x"), 4000u);
  EXPECT_THROW(parse_size("1.5G", "x"), InvalidInput);
  EXPECT_THROW(parse_size("4k", "x"), InvalidInput);
  // An absurd size is refused with the range.
  try {
    parse_size("100000000TiB", "--device-memory");
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("from 1 byte to 8 EiB"), std::string::npos) << e.what();
  }
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
  DevicePlan thrice =
      plan_device({kModels + "tiny.onnx", kModels + "tiny.onnx", kModels + "tiny.onnx"},
                  tiny_options(), std::size_t{1} << 20);
  EXPECT_EQ(thrice.models[2].pool, "tiny_3");
  // Names made from long or odd file names follow the one pool-name rule, and the string plan
  // prints is accepted by the pools key.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "modelmem_pool_names";
  std::filesystem::create_directories(dir);
  const std::filesystem::path odd = dir / (std::string(60, 'm') + " v2 (final).onnx");
  std::filesystem::copy_file(kModels + "tiny.onnx", odd,
                             std::filesystem::copy_options::overwrite_existing);
  DevicePlan long_names = plan_device({odd.string(), odd.string()}, tiny_options(), 1 << 20);
  for (const ModelShare& m : long_names.models)
    EXPECT_TRUE(modelmem::core::valid_pool_name(m.pool)) << m.pool;
  EXPECT_EQ(long_names.models[1].pool, long_names.models[0].pool + "_2");
  EXPECT_EQ(modelmem::config::parse_pools(long_names.config_string_all().substr(6)).size(), 2u);
  std::filesystem::remove_all(dir);
  // A dim no model has is an error.
  PlanOptions bad = tiny_options();
  bad.dims["nope"] = 3;
  EXPECT_THROW(plan_device({kModels + "tiny.onnx"}, bad, std::size_t{1} << 30), InvalidInput);
  EXPECT_THROW(plan_device({}, tiny_options(), 1), InvalidInput);
  EXPECT_THROW(plan_device({kModels + "tiny.onnx"}, tiny_options(), 0), InvalidInput);
}

}  // namespace
}  // namespace modelmem::model
