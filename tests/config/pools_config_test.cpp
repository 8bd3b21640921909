// pools:[NAME:MiB,...] and default_pool: parsing, the stack they build, quotas per pool, the
// selection per thread, and a breach that names the pool.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::config {
namespace {

std::string pools_error_of(const std::string& text) {
  try {
    build(parse_config(text));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PoolsConfig, ParsesNamesAndQuotasInOrder) {
  auto pools = parse_pools("[bert:512, resnet-50.b1:256]");
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].name, "bert");
  EXPECT_EQ(pools[0].bytes, 512 * kMiB);
  EXPECT_EQ(pools[1].name, "resnet-50.b1");
  EXPECT_EQ(pools[1].bytes, 256 * kMiB);
}

TEST(PoolsConfig, BadStringsNameTheProblem) {
  EXPECT_NE(pools_error_of("pools:bert:512").find("config: pools: expected [NAME:MiB,...]"),
            std::string::npos);
  EXPECT_NE(pools_error_of("pools:[bert:0]").find("quota '0'"), std::string::npos);
  EXPECT_NE(pools_error_of("pools:[bert:x]").find("quota 'x'"), std::string::npos);
  EXPECT_NE(pools_error_of("pools:[bert]").find("is not NAME:MiB"), std::string::npos);
  EXPECT_NE(pools_error_of("pools:[a b:1]").find("is not a pool name"), std::string::npos);
  EXPECT_NE(pools_error_of("pools:[a:1,a:2]").find("named twice"), std::string::npos);
  EXPECT_NE(pools_error_of("default_pool:a").find("default_pool: needs pools"), std::string::npos);
  EXPECT_NE(pools_error_of("pools:[a:1],default_pool:b").find("'b' is not one of pools"),
            std::string::npos);
  EXPECT_NE(pools_error_of("strategy:system,pools:[a:1]").find("pools: has no effect"),
            std::string::npos);
  EXPECT_NE(pools_error_of("pools:[a:99999999]").find("more than"), std::string::npos);
  // strategy:static: the main stack still needs its size, unless every request has a pool.
  EXPECT_NE(pools_error_of("strategy:static,pools:[a:8]").find("static_pool_mb"),
            std::string::npos);
  EXPECT_EQ(pools_error_of("strategy:static,pools:[a:8],default_pool:a"), "");
}

TEST(PoolsConfig, EachPoolHoldsItsQuotaAndABreachNamesIt) {
  Built b = build(parse_config("strategy:caching,pools:[bert:8,resnet:4]"));
  auto* router = dynamic_cast<alloc::PoolRouter*>(b.allocator.get());
  ASSERT_NE(router, nullptr);
  ASSERT_EQ(b.pools.size(), 2u);
  EXPECT_EQ(b.pools[1].quota, 4 * kMiB);
  void* main = b.allocator->allocate(16 * kMiB);  // no pool selected: the main stack, no quota
  router->push_pool("resnet");
  EXPECT_EQ(router->current_pool(), "resnet");
  void* r = b.allocator->allocate(3 * kMiB);
  try {
    b.allocator->allocate(2 * kMiB);
    ADD_FAILURE() << "no QuotaExceeded";
  } catch (const QuotaExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("pool 'resnet'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4.00 MiB"), std::string::npos) << e.what();
  }
  router->push_pool("bert");                  // nested
  void* q = b.allocator->allocate(6 * kMiB);  // bert's quota is untouched by resnet's
  EXPECT_TRUE(router->pop_pool());
  EXPECT_EQ(router->current_pool(), "resnet");
  // Another thread selected nothing: its requests go to the main stack, and it may free a
  // block of any pool into the pool that made it.
  std::thread([&] {
    EXPECT_EQ(router->current_pool(), "");
    b.allocator->deallocate(q);
  }).join();
  EXPECT_EQ(b.pools[0].allocator->stats().allocated_bytes.all.current, 0);
  EXPECT_TRUE(router->pop_pool());
  EXPECT_FALSE(router->pop_pool());
  EXPECT_THROW(router->push_pool("gan"), InvalidInput);
  b.allocator->deallocate(r);
  b.allocator->deallocate(main);
  EXPECT_THROW(b.allocator->deallocate(main), InvalidInput);
}

TEST(PoolsConfig, DefaultPoolTakesEveryUnselectedRequest) {
  Built b = build(parse_config("strategy:static,pools:[only:4],default_pool:only"));
  EXPECT_EQ(b.allocator->describe().find("main stack"), std::string::npos);
  void* p = b.allocator->allocate(3 * kMiB);
  EXPECT_THROW(b.allocator->allocate(2 * kMiB), QuotaExceeded);
  b.allocator->deallocate(p);
}

}  // namespace
}  // namespace modelmem::config
