// What a pluggable library shows in `modelmem info` for the stack it built (config/publish.hpp).
#include "modelmem/config/publish.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include "modelmem/core/bytes.hpp"

namespace modelmem::config {
namespace {

TEST(PoolInfo, NamesTheStrategyAndGivesTheBudgetInBytes) {
  unsetenv("MODELMEM_POOL_NAME");
  const Config c = parse_config("strategy:static,static_pool_mb:16");
  const monitor::PoolInfo info = pool_info(c, build(c), "npu", "npu:0");
  EXPECT_EQ(info.name, "npu");
  EXPECT_EQ(info.device, "npu:0");
  EXPECT_EQ(info.strategy, "static");
  EXPECT_EQ(info.budget, 16 * kMiB);  // bytes, as the monitor's budget is

  const Config e = parse_config("strategy:caching,expandable_segments:True");
  EXPECT_EQ(pool_info(e, build(e), "pytorch", "cuda:1").strategy, "expandable");
  const Config plain = parse_config("strategy:caching");
  const Built built = build(plain);
  EXPECT_EQ(built.setting("strategy"), "caching");
  EXPECT_EQ(built.setting("no_such_setting"), "");
  EXPECT_EQ(pool_info(plain, built, "pytorch", "cuda:1").budget, 0u);

  setenv("MODELMEM_POOL_NAME", "encoder", 1);
  EXPECT_EQ(pool_info(plain, built, "pytorch", "cuda:1").name, "encoder");
  unsetenv("MODELMEM_POOL_NAME");
}

}  // namespace
}  // namespace modelmem::config
