#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::config {
using namespace modelmem::alloc;
namespace {

// The InvalidInput message for `text`, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_config(text);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REJECTED(text, needle)                                            \
  do {                                                                           \
    std::string err_ = error_of(text);                                           \
    EXPECT_NE(err_.find(needle), std::string::npos) << (text) << " -> " << err_; \
  } while (0)

TEST(ConfigParse, EmptyStringGivesTheDefaults) {
  Config c = parse_config("");
  EXPECT_TRUE(c.explicit_keys.empty());
  EXPECT_EQ(c.get("strategy"), "caching");
  EXPECT_EQ(c.get("device"), "host");
  EXPECT_FALSE(c.get_bool("expandable_segments"));
  EXPECT_EQ(c.get("fallback"), "caching");
  EXPECT_DOUBLE_EQ(c.get_double("per_process_memory_fraction"), 1.0);
  EXPECT_EQ(c.get("static_pool_mb"), "");
  EXPECT_THROW(c.get_size("static_pool_mb"), InvalidInput);  // unset
  EXPECT_THROW(c.get("no_such_key"), InvalidInput);
  // Every key of the table has an entry.
  for (const auto& k : config_keys()) EXPECT_EQ(c.values.count(k.name), 1u) << k.name;
  EXPECT_EQ(parse_config("  ").explicit_keys.size(), 0u);
}

TEST(ConfigParse, EveryKeyAcceptsItsForms) {
  Config c = parse_config(
      " strategy : caching , device:limited,device_capacity_mb:2048,device_vmm:true,"
      "expandable_segments:True,fallback:static,model_type:transformer,safety_factor:1.25,"
      "roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6,"
      "per_process_memory_fraction:0.5,huge_pages:1,prefault:False");
  EXPECT_EQ(c.explicit_keys.size(), 13u);
  EXPECT_EQ(c.explicit_keys.front(), "strategy");
  EXPECT_TRUE(c.has("device_vmm"));
  EXPECT_FALSE(c.has("plan"));
  EXPECT_EQ(c.get_size_mb("device_capacity_mb"), 2048 * kMiB);
  EXPECT_TRUE(c.get_bool("device_vmm"));
  EXPECT_EQ(c.get("device_vmm"), "True");  // booleans are normalised
  EXPECT_TRUE(c.get_bool("huge_pages"));
  EXPECT_FALSE(c.get_bool("prefault"));
  EXPECT_DOUBLE_EQ(c.get_double("safety_factor"), 1.25);
  EXPECT_DOUBLE_EQ(c.get_double("garbage_collection_threshold"), 0.6);
  EXPECT_EQ(c.get("roundup_power2_divisions"), "[256:1,512:2,>:8]");

  Config s = parse_config("strategy:static,static_pool_mb:512");
  EXPECT_EQ(s.get_size_mb("static_pool_mb"), 512 * kMiB);
  Config p = parse_config("strategy:static,plan:/tmp/x.json,safety_factor:2");
  EXPECT_EQ(p.get("plan"), "/tmp/x.json");
  Config m = parse_config("strategy:caching,max_split_size_mb:64,roundup_power2_divisions:4");
  EXPECT_EQ(m.get_size("max_split_size_mb"), 64u);
  EXPECT_EQ(parse_config("strategy:system").get("strategy"), "system");
  EXPECT_EQ(parse_config("expandable_segments:False,strategy:static,static_pool_mb:1")
                .get("expandable_segments"),
            "False");
}

TEST(ConfigParse, PresetsFillTheirSafetyFactor) {
  EXPECT_EQ(parse_config("strategy:static,model_type:cnn").get("safety_factor"), "1.2");
  EXPECT_EQ(parse_config("strategy:static,model_type:transformer").get("safety_factor"), "1.5");
  EXPECT_EQ(parse_config("strategy:static,model_type:gan").get("safety_factor"), "1.3");
  EXPECT_EQ(parse_config("strategy:static,model_type:gan,safety_factor:2").get("safety_factor"),
            "2");
  EXPECT_EQ(parse_config("strategy:static,plan:p.json").get("safety_factor"), "1.0");
}

TEST(ConfigParse, SyntaxErrors) {
  EXPECT_REJECTED("strategy", "strategy: missing ':VALUE'");
  EXPECT_REJECTED("strategy:", "strategy: missing value");
  EXPECT_REJECTED("strategy:static,,static_pool_mb:1", "empty entry");
  EXPECT_REJECTED("strategy:caching,", "empty entry");
  EXPECT_REJECTED("bogus:1", "unknown key 'bogus'");
  EXPECT_REJECTED("Strategy:static", "unknown key 'Strategy'");
  EXPECT_REJECTED("strategy:static,strategy:caching", "strategy: given twice");
  EXPECT_REJECTED("roundup_power2_divisions:[256:1", "unbalanced '['");
  EXPECT_REJECTED("roundup_power2_divisions:256:1]", "unbalanced ']'");
}

TEST(ConfigParse, MalformedValuesNameTheKey) {
  EXPECT_REJECTED("strategy:fast", "strategy: expected static, caching, system or planned");
  EXPECT_REJECTED("device:cuda", "device: expected host, limited, npu or npu:N");
  EXPECT_REJECTED("device:npu:-1", "device: npu:N needs a device index N in [0, 1024)");
  EXPECT_REJECTED("device:limited,device_capacity_mb:0", "device_capacity_mb: must be > 0");
  EXPECT_REJECTED("device:limited,device_capacity_mb:1.5", "device_capacity_mb: expected a whole");
  EXPECT_REJECTED("device:limited,device_capacity_mb:99999999999999999999",
                  "device_capacity_mb: expected a whole");
  EXPECT_REJECTED("device:limited,device_capacity_mb:17592186044416", "does not fit in 64 bits");
  EXPECT_REJECTED("device:limited,device_vmm:yes", "device_vmm: expected True or False");
  EXPECT_REJECTED("expandable_segments:TRUE", "expandable_segments: expected True or False");
  EXPECT_REJECTED("expandable_segments:True,fallback:none", "fallback: expected caching");
  EXPECT_REJECTED("strategy:static,static_pool_mb:-1", "static_pool_mb: expected a whole");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1e3", "static_pool_mb: expected a whole");
  EXPECT_REJECTED("strategy:static,model_type:rnn", "model_type: expected cnn, transformer or gan");
  EXPECT_REJECTED("strategy:static,model_type:cnn,safety_factor:0.9", "safety_factor: must be in");
  EXPECT_REJECTED("strategy:static,model_type:cnn,safety_factor:abc", "safety_factor: expected a");
  EXPECT_REJECTED("strategy:static,model_type:cnn,safety_factor:inf", "safety_factor: expected a");
  EXPECT_REJECTED("max_split_size_mb:20", "max_split_size_mb: must be > 20");
  EXPECT_REJECTED("max_split_size_mb:big", "max_split_size_mb: expected a whole");
  EXPECT_REJECTED("garbage_collection_threshold:0",
                  "garbage_collection_threshold: must be in (0, 1)");
  EXPECT_REJECTED("garbage_collection_threshold:1.0", "garbage_collection_threshold: must be in");
  EXPECT_REJECTED("garbage_collection_threshold:x", "garbage_collection_threshold: expected a");
  EXPECT_REJECTED("per_process_memory_fraction:0",
                  "per_process_memory_fraction: must be in (0, 1]");
  EXPECT_REJECTED("per_process_memory_fraction:1.5", "per_process_memory_fraction: must be in");
  EXPECT_REJECTED("per_process_memory_fraction:+0.5", "per_process_memory_fraction: expected a");
  EXPECT_REJECTED("huge_pages:on", "huge_pages: expected True or False");
  EXPECT_REJECTED("prefault:2", "prefault: expected True or False");
  EXPECT_REJECTED("thread_cache_mb:-4", "thread_cache_mb: expected a whole");
  EXPECT_REJECTED("thread_cache_mb:1.5", "thread_cache_mb: expected a whole");
}

// Every numeric value has a range, so none overflows when it is multiplied into bytes or
// nanoseconds; the message names the key and the range.
TEST(ConfigParse, NumbersOutOfRangeAreRefusedWithTheKeyAndTheRange) {
  EXPECT_REJECTED("thread_cache_mb:17592186044416",
                  "thread_cache_mb: 17592186044416 MiB is out of range: must be in [0, "
                  "17592186044415] MiB");
  EXPECT_REJECTED("thread_cache_mb:99999999999999999999999", "thread_cache_mb: 9999");
  EXPECT_REJECTED("strategy:planned,planned_min_kb:18014398509481984",
                  "planned_min_kb: 18014398509481984 KiB is out of range");
  EXPECT_REJECTED("strategy:planned,planned_solve_ms:9223372036854775807",
                  "planned_solve_ms: 9223372036854775807 ms is out of range: must be in [1, "
                  "3600000] ms");
  EXPECT_REJECTED("strategy:planned,planned_solve_ms:0", "planned_solve_ms: 0 ms is out of range");
  EXPECT_REJECTED("strategy:planned,planned_max_plans:4294967297",
                  "planned_max_plans: 4294967297 is out of range");
  EXPECT_REJECTED("strategy:planned,planned_warmup_steps:x",
                  "planned_warmup_steps: expected a whole number");
  // The largest accepted values build.
  EXPECT_EQ(error_of("strategy:planned,planned_min_kb:18014398509481983,planned_solve_ms:3600000"),
            "");
}

TEST(ConfigParse, RoundupPower2DivisionsForms) {
  EXPECT_REJECTED("roundup_power2_divisions:3",
                  "roundup_power2_divisions: divisions must be a power of two");
  EXPECT_REJECTED("roundup_power2_divisions:[300:2]", "roundup_power2_divisions: interval '300'");
  EXPECT_REJECTED("roundup_power2_divisions:[256:3]", "divisions must be a power of two or 0");
  EXPECT_REJECTED("roundup_power2_divisions:[256]", "is not SIZE_MB:DIVISIONS");
  EXPECT_REJECTED("roundup_power2_divisions:[]", "is not SIZE_MB:DIVISIONS");
  EXPECT_REJECTED("roundup_power2_divisions:[>:2,256:1]", "'>' must be the last entry");
  EXPECT_REJECTED("roundup_power2_divisions:[512:1,256:2]", "intervals must increase");

  // A single value applies to every size.
  auto one = parse_roundup_power2_divisions("4");
  EXPECT_EQ(one, (std::map<std::size_t, unsigned>{{0, 4}}));
  // PyTorch's list: the first entry also covers all smaller sizes, '>' every larger interval.
  auto list = parse_roundup_power2_divisions("[256:1,512:2,>:8]");
  EXPECT_EQ(list.at(0), 1u);              // < 2 MiB, like 256 MiB's interval
  EXPECT_EQ(list.count(128 * kMiB), 0u);  // same as key 0 -> left out
  EXPECT_EQ(list.at(512 * kMiB), 2u);
  EXPECT_EQ(list.at(1024 * kMiB), 8u);
  EXPECT_EQ(list.at(std::size_t{1} << 40), 8u);  // beyond PyTorch's last interval too
  auto mid = parse_roundup_power2_divisions("[ 1:4 , 64:0 ]");
  EXPECT_EQ(mid.at(0), 4u);
  EXPECT_EQ(mid.at(64 * kMiB), 0u);
  EXPECT_EQ(mid.at(128 * kMiB), 0u);  // intervals after the last entry keep 0 (off)
  EXPECT_EQ(mid.at(32 * kMiB), 0u);   // and so do the gaps between entries, as in PyTorch
}

TEST(ConfigParse, ConflictingCombinationsNameTheKey) {
  EXPECT_REJECTED("expandable_segments:True,max_split_size_mb:64",
                  "max_split_size_mb: conflicts with expandable_segments:True");
  EXPECT_REJECTED("device_capacity_mb:10", "device_capacity_mb: applies only to device:limited");
  EXPECT_REJECTED("device_vmm:True", "device_vmm: applies only to device:limited");
  EXPECT_REJECTED("strategy:system,device:limited", "device: has no effect with strategy:system");
  EXPECT_REJECTED("strategy:system,huge_pages:True",
                  "huge_pages: has no effect with strategy:system");
  EXPECT_REJECTED("strategy:system,expandable_segments:True",
                  "expandable_segments: True needs strategy:caching");
  EXPECT_REJECTED("strategy:static,expandable_segments:True",
                  "expandable_segments: True needs strategy:caching");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,fallback:error",
                  "fallback: applies only with expandable_segments:True");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,max_split_size_mb:64",
                  "max_split_size_mb: applies only to strategy:caching");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,garbage_collection_threshold:0.5",
                  "garbage_collection_threshold: applies only");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,roundup_power2_divisions:2",
                  "roundup_power2_divisions: applies only");
  EXPECT_REJECTED("fallback:caching", "fallback: applies only with expandable_segments:True");
  EXPECT_REJECTED("static_pool_mb:100", "static_pool_mb: sizes a static pool");
  EXPECT_REJECTED("expandable_segments:True,fallback:caching,model_type:cnn",
                  "model_type: sizes a static pool");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,model_type:cnn",
                  "model_type: conflicts with static_pool_mb");
  EXPECT_REJECTED("strategy:static,plan:p.json,model_type:cnn", "model_type: conflicts with plan");
  EXPECT_REJECTED("strategy:static,safety_factor:2", "safety_factor: needs model_type or plan");
  EXPECT_REJECTED("strategy:static,static_pool_mb:5,safety_factor:2",
                  "safety_factor: needs model_type or plan");
  EXPECT_REJECTED("strategy:system,thread_cache_mb:4",
                  "thread_cache_mb: has no effect with strategy:system");
  EXPECT_REJECTED("strategy:static,static_pool_mb:1,thread_cache_mb:4",
                  "thread_cache_mb: applies only to strategy:caching");
  EXPECT_REJECTED(
      "strategy:planned,planned_fallback:direct,thread_cache_mb:4",
      "thread_cache_mb: applies to strategy:planned only with planned_fallback:caching");
}

TEST(ConfigBuild, StaticPoolsFromEverySizeSource) {
  Built b = build(parse_config("strategy:static,static_pool_mb:8"));
  ASSERT_TRUE(b.allocator);
  EXPECT_EQ(b.allocator->stats().reserved_bytes.all.current, static_cast<std::int64_t>(8 * kMiB));
  EXPECT_FALSE(b.fallback_warning);
  EXPECT_NE(b.allocator->describe().find("static"), std::string::npos);
  void* p = b.allocator->allocate(1000);
  b.allocator->deallocate(p);

  Built preset =
      build(parse_config("strategy:static,device:limited,device_capacity_mb:4096,model_type:cnn"));
  EXPECT_EQ(preset.allocator->stats().reserved_bytes.all.current,
            static_cast<std::int64_t>(614 * kMiB));  // 512 MiB x 1.2, in whole MiB

  std::string plan = ::testing::TempDir() + "config_parse_test.json";
  {
    std::ofstream out(plan);
    out << R"({"arena_bytes": 3000000, "weights_bytes": 1000000})";
  }
  Built planned = build(parse_config("strategy:static,plan:" + plan + ",safety_factor:1.5"));
  EXPECT_EQ(planned.allocator->stats().reserved_bytes.all.current, 6000128);  // 256-aligned
  std::remove(plan.c_str());
  EXPECT_THROW(build(parse_config("strategy:static,plan:" + plan)), InvalidInput);

  // Without a size: per_process_memory_fraction of a limited device, refused on the host.
  Built frac = build(parse_config(
      "strategy:static,device:limited,device_capacity_mb:100,per_process_memory_fraction:0.5"));
  EXPECT_EQ(frac.allocator->stats().reserved_bytes.all.current,
            static_cast<std::int64_t>(50 * kMiB));
  try {
    build(parse_config("strategy:static"));
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("a static pool on host:0 needs its size: static_pool_mb, "
                                         "plan, model_type or per_process_memory_fraction"),
              std::string::npos)
        << e.what();
  }
  // Too big for the device, or for the fraction of it.
  EXPECT_THROW(build(parse_config(
                   "strategy:static,device:limited,device_capacity_mb:64,static_pool_mb:128")),
               InvalidInput);
  EXPECT_THROW(build(parse_config("strategy:static,device:limited,device_capacity_mb:64,"
                                  "static_pool_mb:48,per_process_memory_fraction:0.5")),
               InvalidInput);
}

TEST(ConfigBuild, OtherStrategies) {
  Built sys = build(parse_config("strategy:system"));
  EXPECT_FALSE(sys.device);
  EXPECT_NE(sys.allocator->describe().find("system"), std::string::npos);
  sys.allocator->deallocate(sys.allocator->allocate(10));

  Built caching = build(parse_config(
      "device:limited,device_capacity_mb:64,max_split_size_mb:32,roundup_power2_divisions:4,"
      "garbage_collection_threshold:0.8,per_process_memory_fraction:0.75"));
  auto* pool = dynamic_cast<CachingAllocator*>(caching.allocator.get());
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->options().max_split_size, 32 * kMiB);
  EXPECT_EQ(pool->options().roundup_power2_divisions.at(0), 4u);
  EXPECT_DOUBLE_EQ(pool->options().garbage_collection_threshold, 0.8);
  EXPECT_DOUBLE_EQ(pool->options().per_process_memory_fraction, 0.75);
  EXPECT_FALSE(pool->options().expandable_segments);
  EXPECT_EQ(caching.device->name(), "limited:0");
  EXPECT_EQ(caching.probe, "not run (expandable_segments:False)");
  caching.allocator->deallocate(caching.allocator->allocate(1 << 20));
  EXPECT_EQ(pool->options().thread_cache_bytes, 0u) << "off by default, as PyTorch";

  Built cached = build(parse_config("thread_cache_mb:8"));
  auto* tc = dynamic_cast<CachingAllocator*>(cached.allocator.get());
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->options().thread_cache_bytes, 8 * kMiB);
  EXPECT_NE(tc->describe().find("thread cache 8.00 MiB per thread"), std::string::npos);
  void* p = tc->allocate(64 * 1024);
  tc->deallocate(p);
  EXPECT_EQ(tc->allocate(64 * 1024), p) << "a hit from this thread's cache";
  tc->deallocate(p);
  EXPECT_NO_THROW(
      build(parse_config("strategy:planned,planned_fallback:caching,thread_cache_mb:2")));

  Built host =
      build(parse_config("huge_pages:True,prefault:True,strategy:static,static_pool_mb:4"));
  host.allocator->deallocate(host.allocator->allocate(4 * kMiB));
}

TEST(ConfigBuild, ExpandableSegmentsWhereTheDeviceHasVirtualMemory) {
  Built b = build(parse_config("expandable_segments:True"));
  EXPECT_FALSE(b.fallback_warning);
  EXPECT_NE(b.probe.find("virtual memory supported"), std::string::npos) << b.probe;
  auto* pool = dynamic_cast<CachingAllocator*>(b.allocator.get());
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(pool->options().expandable_segments);
  b.allocator->deallocate(b.allocator->allocate(3 * kMiB));

  Built vm = build(parse_config("device:limited,device_vmm:True,expandable_segments:True"));
  EXPECT_FALSE(vm.fallback_warning);
  EXPECT_TRUE(dynamic_cast<CachingAllocator&>(*vm.allocator).options().expandable_segments);
}

int count_of(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1))
    ++n;
  return n;
}

TEST(ConfigFallback, StaticPoolOnALimitedDeviceWithoutVirtualMemoryWarnsOnce) {
  const std::string conf =
      "device:limited,device_capacity_mb:1024,expandable_segments:True,fallback:static,"
      "model_type:cnn";
  const std::string expected =
      "modelmem: expandable_segments is not supported on limited:0 (no virtual memory); "
      "falling back to a static pool of 614 MiB";
  ::testing::internal::CaptureStderr();
  Built first = build(parse_config(conf));
  Built second = build(parse_config(conf));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, expected), 1) << err;  // once per process
  for (const Built* b : {&first, &second}) {
    ASSERT_TRUE(b->fallback_warning);
    EXPECT_EQ(*b->fallback_warning, expected);
    ASSERT_NE(dynamic_cast<StaticAllocator*>(b->allocator.get()), nullptr);
    std::vector<std::string> w = b->allocator->stats().warnings;
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0], expected);
    EXPECT_EQ(b->probe, "limited:0: virtual memory not supported (no virtual memory)");
  }
  EXPECT_EQ(first.allocator->stats().reserved_bytes.all.current,
            static_cast<std::int64_t>(614 * kMiB));
}

TEST(ConfigFallback, StaticPoolSizedByStaticPoolMbOrFraction) {
  ::testing::internal::CaptureStderr();
  Built sized = build(
      parse_config("device:limited,device_capacity_mb:512,expandable_segments:True,fallback:static,"
                   "static_pool_mb:100"));
  Built frac =
      build(parse_config("device:limited,device_capacity_mb:512,expandable_segments:True,"
                         "fallback:static,per_process_memory_fraction:0.25"));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("falling back to a static pool of 100 MiB"), std::string::npos) << err;
  EXPECT_NE(err.find("falling back to a static pool of 128 MiB"), std::string::npos) << err;
  EXPECT_EQ(frac.allocator->stats().reserved_bytes.all.current,
            static_cast<std::int64_t>(128 * kMiB));
}

TEST(ConfigFallback, CachingWithFixedSegments) {
  ::testing::internal::CaptureStderr();
  Built b = build(parse_config(
      "device:limited,device_capacity_mb:256,expandable_segments:True,fallback:caching"));
  std::string err = ::testing::internal::GetCapturedStderr();
  const std::string expected =
      "modelmem: expandable_segments is not supported on limited:0 (no virtual memory); "
      "falling back to the caching pool with fixed-size segments";
  EXPECT_EQ(count_of(err, expected), 1) << err;
  auto* pool = dynamic_cast<CachingAllocator*>(b.allocator.get());
  ASSERT_NE(pool, nullptr);
  EXPECT_FALSE(pool->options().expandable_segments);
  std::vector<std::string> w = b.allocator->stats().warnings;
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], expected);
  b.allocator->deallocate(b.allocator->allocate(5 * kMiB));
}

TEST(ConfigFallback, TheDefaultIsTorchNpusCachingPoolWithOneWarning) {
  ::testing::internal::CaptureStderr();
  Built b = build(parse_config("device:limited,device_capacity_mb:300,expandable_segments:True"));
  Built again =
      build(parse_config("device:limited,device_capacity_mb:300,expandable_segments:True"));
  std::string err = ::testing::internal::GetCapturedStderr();
  const std::string expected =
      "modelmem: expandable_segments is not supported on limited:0 (no virtual memory); "
      "falling back to the caching pool with fixed-size segments";
  EXPECT_LE(count_of(err, expected), 1) << err;  // once per process (an earlier test may have)
  ASSERT_TRUE(b.fallback_warning);
  EXPECT_EQ(*b.fallback_warning, expected);
  EXPECT_EQ(b.allocator->stats().warnings, std::vector<std::string>{expected});
  EXPECT_EQ(b.setting("fallback"), "caching (fixed-size segments)");
  ASSERT_NE(dynamic_cast<CachingAllocator*>(b.allocator.get()), nullptr);
  b.allocator->deallocate(b.allocator->allocate(7 * kMiB));
}

TEST(ConfigFallback, AStaticPoolWithoutItsSizeIsRefusedNamingTheKeys) {
  for (const char* conf : {"strategy:static", "expandable_segments:True,fallback:static",
                           "device:limited,expandable_segments:True,fallback:static,"
                           "per_process_memory_fraction:0.001"}) {
    try {
      // A device of its own capacity (device:limited) is sized; the others need a size.
      Config c = parse_config(conf);
      if (c.get("device") == "limited") {
        build(c);  // 1 MiB of 1 GiB: fine
        continue;
      }
      device::DevicePtr region = device::make_limited_device(device::make_host_device({}),
                                                             std::size_t{64} << 20, false, 0);
      c.values["device"] = "host";
      build(c, region);
      FAIL() << conf;
    } catch (const InvalidInput& e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "needs its size: static_pool_mb, plan, model_type or per_process_memory_fraction"),
          std::string::npos)
          << e.what();
    }
  }
}

TEST(ConfigFallback, ErrorRefusesToBuild) {
  try {
    build(parse_config("device:limited,expandable_segments:True,fallback:error"));
    FAIL();
  } catch (const Unsupported& e) {
    EXPECT_EQ(std::string(e.what()),
              "expandable_segments is not supported on limited:0 (no virtual memory); "
              "fallback:error forbids building anything else");
  }
}

TEST(ConfigBuild, FromTheEnvironment) {
  setenv("MODELMEM_ALLOC_CONF", "strategy:static,static_pool_mb:3", 1);
  Built b = build_from_env();
  EXPECT_EQ(b.allocator->stats().reserved_bytes.all.current, static_cast<std::int64_t>(3 * kMiB));
  setenv("MODELMEM_ALLOC_CONF", "strategy:nope", 1);
  EXPECT_THROW(build_from_env(), InvalidInput);
  unsetenv("MODELMEM_ALLOC_CONF");
  Built d = build_from_env();
  EXPECT_NE(dynamic_cast<CachingAllocator*>(d.allocator.get()), nullptr);
}

}  // namespace
}  // namespace modelmem::config

namespace modelmem::config {
namespace {

// PyTorch's and torch_npu's large_segment_size_mb: the large pool's fixed segments.
TEST(ConfigBuild, LargeSegmentSizeSetsTheLargePoolsSegments) {
  Built b = build(parse_config("large_segment_size_mb:64"));
  EXPECT_NE(b.allocator->describe().find("large from 64.00 MiB segments"), std::string::npos)
      << b.allocator->describe();
  void* p = b.allocator->allocate(3 * kMiB);  // between 1 and 10 MiB: one large segment
  EXPECT_EQ(b.allocator->stats().reserved_bytes.all.current, static_cast<std::int64_t>(64 * kMiB));
  b.allocator->deallocate(p);
  // Smaller than the 10 MiB cut: requests up to it still fit one segment.
  Built small = build(parse_config("large_segment_size_mb:4"));
  void* q = small.allocator->allocate(6 * kMiB);
  EXPECT_GE(small.allocator->block_size(q), 6 * kMiB);
  small.allocator->deallocate(q);
  EXPECT_REJECTED("large_segment_size_mb:1", "large_segment_size_mb: must be in [2, 1048576]");
  EXPECT_REJECTED("strategy:static,static_pool_mb:8,large_segment_size_mb:64",
                  "large_segment_size_mb: applies only to strategy:caching");
  EXPECT_REJECTED("strategy:system,large_segment_size_mb:64",
                  "large_segment_size_mb: has no effect with strategy:system");
}

}  // namespace
}  // namespace modelmem::config
