#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "event_recorder.hpp"
#include "modelmem/alloc/partitions.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "static_test_device.hpp"

namespace modelmem::alloc {
namespace {

using modelmem::testing::CountingDevice;
PartitionOptions budget(std::size_t bytes) {
  PartitionOptions o;
  o.budget = bytes;
  return o;
}

using Recorder = modelmem::testing::EventRecorder;

TEST(QuotaAdaptor, RefusesOverQuotaNamingPoolQuotaAndUse) {
  auto upstream = std::make_shared<SystemAllocator>();
  QuotaAdaptor q(upstream, {"bert", 1 * kMiB, 256, nullptr});
  void* a = q.allocate(600 * kKiB);
  EXPECT_EQ(q.used(), 600 * kKiB);
  try {
    q.allocate(500 * kKiB);
    FAIL();
  } catch (const QuotaExceeded& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("pool 'bert'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("quota of 1.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600.00 KiB in use"), std::string::npos) << msg;
    // No device was given: no "device free 0 B" that nobody measured.
    EXPECT_EQ(msg.find("device free"), std::string::npos) << msg;
    EXPECT_EQ(e.info().quota, 1 * kMiB);
    EXPECT_EQ(e.info().requested, 500 * kKiB);
    EXPECT_EQ(e.info().allocated, 600 * kKiB);
  }
  EXPECT_EQ(upstream->stats().allocation.all.allocated, 1);  // the refused one never got there
  EXPECT_EQ(q.stats().num_ooms, 1);
  void* b = q.allocate(424 * kKiB);  // exactly up to the quota is fine
  EXPECT_EQ(q.used(), 1 * kMiB);
  EXPECT_THROW(q.allocate(1), QuotaExceeded);
  q.deallocate(a);
  EXPECT_THROW(q.deallocate(a), InvalidInput);
  EXPECT_EQ(q.used(), 424 * kKiB);
  EXPECT_EQ(q.peak_used(), 1 * kMiB);
  q.reset_peak();
  EXPECT_EQ(q.peak_used(), 424 * kKiB);
  q.deallocate(b);
  EXPECT_EQ(q.used(), 0u);
  EXPECT_THROW(q.allocate(SIZE_MAX), QuotaExceeded);
  EXPECT_THROW(q.allocate(0), InvalidInput);
  EXPECT_THROW(QuotaAdaptor(upstream, {"x", 0, 256, nullptr}), InvalidInput);
  EXPECT_THROW(QuotaAdaptor(nullptr, {"x", 1, 256, nullptr}), InvalidInput);
}

TEST(QuotaAdaptor, UpstreamOomIsRefundedAndCarriesTheQuota) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  auto arena = std::make_shared<StaticAllocator>(dev, StaticOptions{1 * kMiB, 256});
  QuotaAdaptor q(arena, {"cnn", 2 * kMiB, 256, dev});
  try {
    q.allocate(1536 * kKiB);  // under the quota, over the arena
    FAIL();
  } catch (const QuotaExceeded&) {
    FAIL() << "not a quota problem";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().quota, 2 * kMiB);
    EXPECT_NE(std::string(e.what()).find("pool 'cnn'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q.used(), 0u);
}

TEST(QuotaAdaptor, ConcurrentRequestsNeverOvershoot) {
  auto upstream = std::make_shared<SystemAllocator>();
  auto q = std::make_shared<QuotaAdaptor>(upstream, QuotaOptions{"p", 64 * kKiB, 256, nullptr});
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::vector<void*> mine;
      for (int i = 0; i < 3000; ++i) {
        try {
          mine.push_back(q->allocate(4 * kKiB));
        } catch (const QuotaExceeded&) {
        }
        if (q->used() > 64 * kKiB) over = true;
        if (mine.size() > 3 || (i % 3 == 0 && !mine.empty())) {
          q->deallocate(mine.back());
          mine.pop_back();
        }
      }
      for (void* p : mine) q->deallocate(p);
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_LE(upstream->stats().allocated_bytes.all.peak, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(q->used(), 0u);
}

TEST(Partitions, EqualSharesAndIsolation) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  Partitions parts(dev, PoolSpec::equal({"resnet", "bert"}), budget(12 * kMiB));
  auto report = parts.report();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0].quota, 6 * kMiB);
  EXPECT_EQ(report[1].quota, 6 * kMiB);
  EXPECT_EQ(dev->used(), 12 * kMiB);  // static backing: guaranteed up front

  // resnet fills its share; one more byte is refused, naming resnet, not taken from bert.
  void* r = parts.pool("resnet").allocate(6 * kMiB);
  try {
    parts.pool("resnet").allocate(1);
    FAIL();
  } catch (const QuotaExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("pool 'resnet'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("6.00 MiB in use of its quota of 6.00 MiB"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("device free"), std::string::npos) << e.what();
  }
  void* b = parts.pool("bert").allocate(6 * kMiB);  // bert still has all of its share
  report = parts.report();
  EXPECT_EQ(report[0].used, 6 * kMiB);
  EXPECT_EQ(report[0].stats.num_ooms, 1);
  EXPECT_EQ(report[1].stats.num_ooms, 0);
  EXPECT_EQ(report[1].stats.allocated_bytes.all.current, static_cast<std::int64_t>(6 * kMiB));
  EXPECT_THROW(parts.pool("bert").deallocate(r), InvalidInput);  // another pool's block
  parts.pool("resnet").deallocate(r);
  parts.pool("bert").deallocate(b);
  EXPECT_THROW(parts.pool("gpt"), InvalidInput);
  EXPECT_NE(parts.describe().find("resnet=6.00 MiB"), std::string::npos) << parts.describe();
}

TEST(Partitions, WeightsExplicitSizesAndPlans) {
  auto dev = std::make_shared<CountingDevice>(256 * kMiB);
  std::string plan = ::testing::TempDir() + "partitions_quota_test.json";
  {
    std::ofstream out(plan);
    out << R"({"arena_bytes": 3145728, "weights_bytes": 1048576})";
  }
  std::vector<PoolSpec> specs = {PoolSpec::from_plan("planned", plan, 1.5),
                                 PoolSpec{"fixed", 10 * kMiB, 0}, PoolSpec{"heavy", 0, 3.0},
                                 PoolSpec{"light", 0, 1.0}};
  Partitions parts(dev, specs, budget(100 * kMiB));
  auto r = parts.report();
  EXPECT_EQ(r[0].quota, 6 * kMiB);  // (3 + 1) MiB x 1.5
  EXPECT_EQ(r[1].quota, 10 * kMiB);
  EXPECT_EQ(r[2].quota, 63 * kMiB);  // 3/4 of the 84 MiB left
  EXPECT_EQ(r[3].quota, 21 * kMiB);
  EXPECT_EQ(parts.names(), (std::vector<std::string>{"planned", "fixed", "heavy", "light"}));
  std::remove(plan.c_str());
  EXPECT_THROW(PoolSpec::from_plan("x", plan), InvalidInput);
}

TEST(Partitions, RejectsImpossibleSplits) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  EXPECT_THROW(Partitions(dev, {}, budget(0)), InvalidInput);
  EXPECT_THROW(Partitions(dev, PoolSpec::equal({"a", "a"}), budget(kMiB)), InvalidInput);
  EXPECT_THROW(Partitions(dev, PoolSpec::equal({""}), budget(kMiB)), InvalidInput);
  EXPECT_THROW(Partitions(dev, {PoolSpec{"a", 0, 0.0}}, budget(kMiB)), InvalidInput);
  EXPECT_THROW(Partitions(dev, {PoolSpec{"a", 2 * kMiB, 1}}, budget(kMiB)), InvalidInput);
  EXPECT_THROW(Partitions(dev, {PoolSpec{"a", kMiB, 1}, PoolSpec{"b", 0, 1}}, budget(kMiB)),
               InvalidInput);  // nothing left for b
  EXPECT_THROW(Partitions(dev, PoolSpec::equal({"a"}), budget(128 * kMiB)), InvalidInput);
  EXPECT_THROW(Partitions(nullptr, PoolSpec::equal({"a"}), budget(kMiB)), InvalidInput);
  EXPECT_EQ(dev->used(), 0u);
  // budget 0 = the device's free memory
  Partitions all(dev, PoolSpec::equal({"a", "b"}));
  EXPECT_EQ(all.budget(), 64 * kMiB);
}

TEST(Partitions, EventsCarryThePoolIndex) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  Partitions parts(dev, PoolSpec::equal({"a", "b"}), budget(2 * kMiB));
  Recorder rec;
  parts.set_listener(&rec);
  void* p = parts.pool("b").allocate(1000);
  EXPECT_THROW(parts.pool("a").allocate(2 * kMiB), QuotaExceeded);
  parts.pool("b").deallocate(p);
  parts.set_listener(nullptr);
  parts.pool("a").deallocate(parts.pool("a").allocate(10));  // not recorded
  const std::vector<Event> blocks = rec.blocks();            // the static arenas' segments aside
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].kind, EventKind::kAlloc);
  EXPECT_EQ(blocks[0].pool, 1u);
  EXPECT_EQ(blocks[1].kind, EventKind::kOom);
  EXPECT_EQ(blocks[1].pool, 0u);
  EXPECT_EQ(blocks[2].kind, EventKind::kFree);
  EXPECT_EQ(blocks[2].pool, 1u);
}

// The README's example, kept honest.
TEST(Partitions, ReadmeExampleOnALimitedDevice) {
  auto gpu = device::make_limited_device(device::make_host_device(), 1024u << 20);
  PartitionOptions options;
  options.budget = 768u << 20;
  Partitions parts(
      gpu, {PoolSpec{"resnet", 256u << 20}, PoolSpec{"bert", 0, 3.0}, PoolSpec{"gan", 0, 1.0}},
      options);
  void* x = parts.pool("resnet").allocate(200u << 20);
  EXPECT_THROW(parts.pool("resnet").allocate(100u << 20), QuotaExceeded);
  void* y = parts.pool("bert").allocate(300u << 20);
  auto r = parts.report();
  EXPECT_EQ(r[0].quota, 256 * kMiB);
  EXPECT_EQ(r[1].quota, 384 * kMiB);
  EXPECT_EQ(r[2].quota, 128 * kMiB);
  EXPECT_EQ(r[0].stats.num_ooms, 1);
  EXPECT_EQ(gpu->memory_info().free, 256 * kMiB);  // the 768 MiB are held by the pools
  parts.pool("resnet").deallocate(x);
  parts.pool("bert").deallocate(y);
}

TEST(Partitions, CachingPoolsOnTheirOwnDeviceViews) {
  auto gpu = device::make_limited_device(device::make_host_device(), 256 * kMiB);
  PartitionOptions options;
  options.budget = 128 * kMiB;
  options.backing = PoolBacking::kCaching;
  Partitions parts(gpu, PoolSpec::equal({"a", "b"}), options);
  EXPECT_EQ(gpu->memory_info().free, 256 * kMiB);  // nothing taken up front
  std::vector<void*> a;
  for (int i = 0; i < 6; ++i) a.push_back(parts.pool("a").allocate(10 * kMiB));
  EXPECT_THROW(parts.pool("a").allocate(10 * kMiB), OutOfMemory);  // quota or device view
  void* b = parts.pool("b").allocate(60 * kMiB);                   // b's share is still there
  auto r = parts.report();
  EXPECT_LE(r[0].stats.reserved_bytes.all.current, static_cast<std::int64_t>(64 * kMiB));
  EXPECT_EQ(r[1].used, 60 * kMiB);
  for (void* p : a) parts.pool("a").deallocate(p);
  parts.pool("b").deallocate(b);
  EXPECT_NE(parts.describe().find("caching pools"), std::string::npos);
}

}  // namespace
}  // namespace modelmem::alloc
