// `modelmem config` as a user runs it: exit codes, the printed stack, the fallback line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/command.hpp"

namespace {

using CliResult = modelmem::testing::CommandResult;  // out: stdout and stderr together

CliResult run_config(const std::string& args) {
  return modelmem::testing::run_command(std::string(MODELMEM_BINARY_DIR) + "/modelmem config " +
                                        args + " 2>&1");
}

class ConfigCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(MODELMEM_BINARY_DIR) + "/modelmem"))
      GTEST_SKIP() << "the modelmem tool is not built";
  }
};

TEST_F(ConfigCli, PrintsTheStackProbeAndFallback) {
  CliResult r = run_config(
      "device:limited,device_capacity_mb:1024,expandable_segments:True,fallback:static,"
      "model_type:cnn");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("  * model_type                     cnn"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    safety_factor                  1.2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probe:     limited:0: virtual memory not supported (no virtual memory)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fallback:  modelmem: expandable_segments is not supported on limited:0 "
                       "(no virtual memory); falling back to a static pool of 614 MiB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("allocator: static: one pool of 614.00 MiB on limited:0"), std::string::npos)
      << r.out;
}

// cache_decay_ms: on by default (10 s), printed among the caching pool's settings, changed or
// turned off by the key, refused out of range and where no caching pool serves.
TEST_F(ConfigCli, CacheDecayIsOnByDefaultAndPrinted) {
  CliResult r = run_config("strategy:caching");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("    cache_decay_ms                 10000"), std::string::npos) << r.out;
  r = run_config("strategy:caching,cache_decay_ms:0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("  * cache_decay_ms                 0"), std::string::npos) << r.out;
  r = run_config("strategy:caching,cache_decay_ms:3600001");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cache_decay_ms: 3600001 ms is out of range: must be in [0, 3600000] ms"),
            std::string::npos)
      << r.out;
  r = run_config("strategy:system,cache_decay_ms:5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cache_decay_ms: has no effect with strategy:system"), std::string::npos)
      << r.out;
}

TEST_F(ConfigCli, BadStringsExitWithCode2) {
  CliResult r = run_config("expandable_segments:True,max_split_size_mb:64");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("max_split_size_mb: conflicts with expandable_segments:True"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(run_config("nonsense:1").code, 2);
  CliResult e = run_config("device:limited,expandable_segments:True,fallback:error");
  EXPECT_EQ(e.code, 1) << e.out;
  EXPECT_NE(e.out.find("fallback:error forbids"), std::string::npos) << e.out;
}

// `config` accepts exactly what `run` accepts: the preload's keys are range-checked at parse
// time, so a value `config` takes never fails (or wraps) when `run` builds the stack.
TEST_F(ConfigCli, PreloadKeysOutOfRangeAreRefusedAsRunRefusesThem) {
  struct Case {
    const char* conf;
    const char* says;
  };
  for (const Case& c :
       {Case{"preload_threshold_kb:18014398509481984",
             "preload_threshold_kb: 18014398509481984 KiB is out of range: must be in [1, "
             "18014398509481983] KiB"},
        Case{"preload_reserve_gb:18446744073709551615",
             "preload_reserve_gb: 18446744073709551615 GiB is out of range: must be in [1, "
             "131072] GiB"},
        Case{"preload_reserve_gb:0", "preload_reserve_gb: 0 GiB is out of range"},
        Case{"preload_cache_kb:18446744073709551616", "preload_cache_kb: 18446744073709551616"}}) {
    CliResult r = run_config(c.conf);
    EXPECT_EQ(r.code, 2) << c.conf << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.conf << "\n" << r.out;
    CliResult run = modelmem::testing::run_command(std::string(MODELMEM_BINARY_DIR) +
                                                   "/modelmem run --dry-run --conf " + c.conf +
                                                   " -- true 2>&1");
    EXPECT_EQ(run.code, 2) << c.conf << "\n" << run.out;
    EXPECT_NE(run.out.find(c.says), std::string::npos) << c.conf << "\n" << run.out;
  }
  // The largest values are accepted by both (the reservation adapts to what fits).
  const char* largest = "preload_threshold_kb:18014398509481983,preload_reserve_gb:131072";
  EXPECT_EQ(run_config(largest).code, 0);
  CliResult run =
      modelmem::testing::run_command(std::string(MODELMEM_BINARY_DIR) +
                                     "/modelmem run --dry-run --conf " + largest + " -- true 2>&1");
  EXPECT_EQ(run.code, 0) << run.out;
}

TEST_F(ConfigCli, DefaultsToTheEnvironmentAndListsKeys) {
  CliResult r = run_config("");  // no STRING: the environment's setting, none here
  if (std::getenv("MODELMEM_ALLOC_CONF") == nullptr &&
      std::getenv("PYTORCH_NPU_ALLOC_CONF") == nullptr &&
      std::getenv("PYTORCH_ALLOC_CONF") == nullptr) {
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("(from defaults (MODELMEM_ALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are not "
                         "set))"),
              std::string::npos)
        << r.out;
  }
  CliResult keys = run_config("--keys");
  EXPECT_EQ(keys.code, 0);
  EXPECT_NE(keys.out.find("| `roundup_power2_divisions` | `0` |"), std::string::npos) << keys.out;
}

TEST_F(ConfigCli, EnvironmentString) {
  setenv("MODELMEM_ALLOC_CONF", "strategy:static,static_pool_mb:2", 1);
  CliResult r = run_config("");
  unsetenv("MODELMEM_ALLOC_CONF");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(from MODELMEM_ALLOC_CONF)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("static_pool                    2 MiB (static_pool_mb:2)"),
            std::string::npos)
      << r.out;
}

}  // namespace
