// plan_device(): several models on one device, their needs adding up to the device's quotas,
// pool names and the pool strings the CLI prints, which the configuration's pools key accepts
// (a sizing test: it reads the model layer's plan and the config layer's parser).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/model/plan_model.hpp"
#include "support/bundled_models.hpp"

namespace modelmem::model {
namespace {

using modelmem::testing::kModels, modelmem::testing::tiny_options;

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
