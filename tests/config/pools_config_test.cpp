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

namespace modelmem::config {
namespace {

// Fills pool `a` with 1 MiB blocks, frees every other one (free memory left in pieces of the
// small pool), then asks for 3 MiB (a large-pool request). The error, if any, or "".
std::string fragment_then_ask(const std::string& conf) {
  Built b = build(parse_config(conf));
  auto* router = dynamic_cast<alloc::PoolRouter*>(b.allocator.get());
  router->push_pool("a");
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(router->allocate(kMiB));
  for (std::size_t i = 0; i < blocks.size(); i += 2) router->deallocate(blocks[i]);
  std::string error;
  try {
    router->deallocate(router->allocate(3 * kMiB));
  } catch (const QuotaExceeded& e) {
    error = e.what();
  }
  for (std::size_t i = 1; i < blocks.size(); i += 2) router->deallocate(blocks[i]);
  router->pop_pool();
  return error;
}

// A pool's out-of-memory says where its free memory is and the quota that serves the request,
// and that quota does.
TEST(PoolsConfig, ARefusalSaysWhereTheFreeMemoryIsAndTheQuotaThatServes) {
  const std::string why = fragment_then_ask("strategy:caching,pools:[a:16]");
  ASSERT_NE(why, "");
  EXPECT_NE(why.find("pool 'a' is out of its quota of 16.00 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("free in its segments: 8.00 MiB in the small pool (largest 1.00 MiB, for "
                     "requests <= 1.00 MiB), 0 B in the large pool (largest 0 B)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("(fragmentation: enough is free, but not in one piece"), std::string::npos)
      << why;
  const std::size_t at = why.find("; to change: pools:[a:");
  ASSERT_NE(at, std::string::npos) << why;
  const std::string quota = why.substr(at + 22, why.find(',', at + 22) - at - 22);
  EXPECT_GT(std::stoi(quota), 16) << why;
  EXPECT_EQ(fragment_then_ask("strategy:caching,pools:[a:" + quota + "]"), "")
      << "the quota the message gives serves the request";
}

}  // namespace
}  // namespace modelmem::config

namespace modelmem::config {
namespace {

struct Kinds final : alloc::Listener {
  std::vector<std::pair<alloc::EventKind, std::uint32_t>> seen;
  void on_event(const alloc::Event& e) noexcept override { seen.emplace_back(e.kind, e.pool); }
  std::size_t count(alloc::EventKind k, std::uint32_t pool) const {
    std::size_t n = 0;
    for (const auto& [kind, p] : seen) n += kind == k && p == pool;
    return n;
  }
};

// A listener of a stack with pools (MemoryLogger's way in) sees every allocation, free and
// refusal made inside a pool, with the pool, for every strategy a pool can be.
TEST(PoolsConfig, AListenerSeesAllocationsFreesAndOomsInsidePools) {
  for (const char* strategy : {"caching", "planned", "static"}) {
    Built b =
        build(parse_config(std::string("strategy:") + strategy + ",pools:[a:16],default_pool:a"));
    Kinds kinds;
    b.allocator->set_listener(&kinds);
    alloc::push_pool(*b.allocator, "a");
    std::vector<void*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(b.allocator->allocate(kMiB));
    EXPECT_THROW(b.allocator->allocate(64 * kMiB), QuotaExceeded) << strategy;
    for (void* p : blocks) b.allocator->deallocate(p);
    alloc::pop_pool();
    b.allocator->set_listener(nullptr);
    EXPECT_EQ(kinds.count(alloc::EventKind::kAlloc, 1), 4u) << strategy;
    EXPECT_EQ(kinds.count(alloc::EventKind::kFree, 1), 4u) << strategy;
    EXPECT_EQ(kinds.count(alloc::EventKind::kOom, 1), 1u) << strategy;
  }
}

}  // namespace
}  // namespace modelmem::config
