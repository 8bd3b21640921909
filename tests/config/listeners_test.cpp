// The pluggable libraries' C listeners (config/listeners.hpp): the events of a stack built from a
// string, with device, pool names, sizes and streams; at most four; removal racing with
// allocating threads, after which the function is never called again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/config/listeners.hpp"

namespace modelmem::config {
namespace {

struct Seen {
  std::vector<std::string> lines;
};

void remember(const modelmem_event* e, void* user) {
  static const char* kKinds[] = {"alloc", "free",  "segment_alloc", "segment_free",
                                 "map",   "unmap", "oom",           "mark"};
  auto* seen = static_cast<Seen*>(user);
  seen->lines.push_back(std::string(kKinds[e->kind]) + " " + e->device_name + " " +
                        std::to_string(e->pool) + ":" + e->pool_name + " " +
                        std::to_string(e->size) + " " +
                        std::to_string(reinterpret_cast<std::uintptr_t>(e->stream)));
}

TEST(Listeners, SeeEachBlockWithDevicePoolSizeAndStreamOnlyOnceRegistered) {
  ListenerRegistry registry;
  const Config config = parse_config("pools:[bert:8,resnet:4]");
  Built built = build(config);
  auto relay = relay_stack(registry, config, built, "npu", 3, "npu:3");
  auto* router = dynamic_cast<alloc::PoolRouter*>(built.allocator.get());
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(built.allocator->listener(), nullptr);  // nothing attached before a listener
  void* before = built.allocator->allocate(100);

  Seen seen;
  std::string why;
  const int id = registry.add(&remember, &seen, why);
  ASSERT_GE(id, 0) << why;
  EXPECT_EQ(built.allocator->listener(), relay.get());
  router->push_pool("bert");
  void* p = built.allocator->allocate(4096, 7);
  router->pop_pool();
  built.allocator->deallocate(p);
  built.allocator->deallocate(before);
  EXPECT_EQ(seen.lines, (std::vector<std::string>{
                            "segment_alloc npu:3 1:bert 2097152 7", "alloc npu:3 1:bert 4096 7",
                            "free npu:3 1:bert 4096 7", "free npu:3 0:npu 100 0"}));
  EXPECT_EQ(registry.remove(id, why), 0);
  built.allocator->deallocate(built.allocator->allocate(64));
  EXPECT_EQ(seen.lines.size(), 4u);
  EXPECT_EQ(registry.remove(id, why), -1);
  EXPECT_NE(why.find("no listener 0 is registered"), std::string::npos) << why;
}

TEST(Listeners, AtMostFourAndAFunctionIsNeeded) {
  ListenerRegistry registry;
  Seen seen;
  std::string why;
  EXPECT_EQ(registry.add(nullptr, nullptr, why), -1);
  EXPECT_NE(why.find("no function"), std::string::npos);
  for (int i = 0; i < ListenerRegistry::kMaxListeners; ++i)
    EXPECT_EQ(registry.add(&remember, &seen, why), i);
  EXPECT_EQ(registry.add(&remember, &seen, why), -1);
  EXPECT_NE(why.find("4 listeners are registered already"), std::string::npos) << why;
  EXPECT_EQ(registry.remove(2, why), 0);
  EXPECT_EQ(registry.add(&remember, &seen, why), 2);  // the freed slot
}

// Threads allocate while listeners come and go: every call is counted inside its registration,
// and none arrives after remove() returned.
TEST(Listeners, RemovalRacingWithAllocatingThreadsNeverCallsAfterItReturns) {
  ListenerRegistry registry;
  const Config config = parse_config("strategy:caching");
  Built built = build(config);
  auto relay = relay_stack(registry, config, built, "npu", 0, "npu:0");
  struct Counter {
    std::atomic<bool> removed{false};
    std::atomic<long> calls{0};
    std::atomic<long> late{0};
  };
  auto count = [](const modelmem_event*, void* user) {
    auto* c = static_cast<Counter*>(user);
    if (c->removed.load()) c->late.fetch_add(1);
    c->calls.fetch_add(1);
  };
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      while (!stop.load()) built.allocator->deallocate(built.allocator->allocate(512));
    });
  long total = 0;
  for (int round = 0; round < 100; ++round) {
    Counter c;
    std::string why;
    const int id = registry.add(count, &c, why);
    ASSERT_GE(id, 0) << why;
    // Until the listener has been called (the allocating threads may not run at once on a
    // loaded machine, under the sanitizers): the removal then races with calls in flight.
    for (int wait = 0; wait < 2000 && c.calls.load() == 0; ++wait)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    ASSERT_EQ(registry.remove(id, why), 0) << why;
    c.removed.store(true);
    std::this_thread::yield();
    EXPECT_EQ(c.late.load(), 0);
    total += c.calls.load();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_GT(total, 0);
}

}  // namespace
}  // namespace modelmem::config
