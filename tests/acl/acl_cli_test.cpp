// `modelmem config device:npu,...` and `modelmem info` over the emulated runtime, as a user
// runs them: the probe, the one warning in each virtual-memory case, fallback:static and
// fallback:error, and the NPUs in info's table and JSON.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "support/command.hpp"

namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Result run(const std::string& env, const std::string& args) {
  // One file per process and call: CTest runs these tests in parallel processes.
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "/acl_cli_stderr." +
                               std::to_string(::getpid()) + "." + std::to_string(calls++) + ".txt";
  const std::string cmd =
      "env MODELMEM_MONITOR=0 MODELMEM_ACL_LIBRARY=" + std::string(MODELMEM_EMULATED_ACL) + " " +
      env + " " + MODELMEM_CLI + " " + args + " 2>" + err_file;
  const modelmem::testing::CommandResult c = modelmem::testing::run_command(cmd);
  Result r{c.code, c.out, ""};
  char buf[4096];
  std::size_t n;
  if (FILE* f = std::fopen(err_file.c_str(), "r")) {
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.err.append(buf, n);
    std::fclose(f);
  }
  std::remove(err_file.c_str());
  return r;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The seed's string, as examples/ascend/torch_npu_example.py gives it.
const char* kExpandable = "config device:npu,expandable_segments:True";

TEST(NpuConfigCli, VirtualMemoryPresentNoWarningAndExpandableSegments) {
  Result r = run("MODELMEM_EMULATED_ACL_VMM=present", kExpandable);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("probe:     npu:0: virtual memory supported"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fallback:  none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allocator: caching on npu:0: expandable segments (page 2.00 MiB)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("    device                         npu:0 (Ascend, HBM 1.00 GiB total"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count(r.err, "expandable_segments is not supported"), 0u) << r.err;
}

TEST(NpuConfigCli, VirtualMemoryUnsupportedOneWarningNamingDeviceCodeAndFallback) {
  Result r = run("MODELMEM_EMULATED_ACL_VMM=unsupported", kExpandable);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;  // exactly one line on stderr: the warning
  EXPECT_EQ(count(r.err,
                  "modelmem: expandable_segments is not supported on npu:0 "
                  "(aclrtReserveMemAddress returned 207000 (feature not supported)"),
            1u)
      << r.err;
  EXPECT_NE(r.err.find("falling back to the caching pool with fixed-size segments"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("allocator: caching on npu:0: small <= 1.00 MiB"), std::string::npos)
      << r.out;
}

TEST(NpuConfigCli, FallbackStaticOnlyWithASizeTheDeviceCanGive) {
  Result r = run("MODELMEM_EMULATED_ACL_VMM=unsupported",
                 "config device:npu,expandable_segments:True,fallback:static,static_pool_mb:256");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
  EXPECT_NE(r.err.find("falling back to a static pool of 256 MiB"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("allocator: static: one pool of 256.00 MiB on npu:0"), std::string::npos)
      << r.out;
  // The whole device by fraction: what it can give in one piece, its padding counted.
  r = run("MODELMEM_EMULATED_ACL_VMM=unsupported",
          "config device:npu,expandable_segments:True,fallback:static,"
          "per_process_memory_fraction:1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("falling back to a static pool of 1023 MiB"), std::string::npos) << r.err;
  // The whole device by size: refused before any device call, naming the padding.
  r = run("MODELMEM_EMULATED_ACL_VMM=unsupported",
          "config device:npu,expandable_segments:True,fallback:static,static_pool_mb:1024");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("does not fit on npu:0: its 1.00 GiB hold at most"), std::string::npos)
      << r.err;
  // No size: refused naming the keys.
  r = run("MODELMEM_EMULATED_ACL_VMM=unsupported",
          "config device:npu,expandable_segments:True,fallback:static");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("needs its size: static_pool_mb, plan, model_type or "
                       "per_process_memory_fraction"),
            std::string::npos)
      << r.err;
}

TEST(NpuConfigCli, VirtualMemoryAbsentOneWarningNamingTheMissingSymbol) {
  Result r = run("MODELMEM_EMULATED_ACL_VMM=absent", kExpandable);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "modelmem: expandable_segments is not supported on npu:0 ("), 1u) << r.err;
  EXPECT_NE(r.err.find("lacks aclrtReserveMemAddress"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("falling back to the caching pool with fixed-size segments"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("allocator: caching on npu:0: small <= 1.00 MiB"), std::string::npos)
      << r.out;
}

TEST(NpuConfigCli, WithoutAStringPreviewsTheEnvironmentsSettingAndSaysWhichItRead) {
  Result r = run("PYTORCH_NPU_ALLOC_CONF=expandable_segments:True MODELMEM_EMULATED_ACL_VMM=absent",
                 "config");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("config: \"device:npu,expandable_segments:True\" (from "
                       "PYTORCH_NPU_ALLOC_CONF, torch_npu's, translated as "
                       "libmodelmem_npu_alloc.so reads it)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count(r.err, "falling back to the caching pool with fixed-size segments"), 1u) << r.err;
  // A key torch_npu accepts and modelmem maps: the stack builds, the note says what was done.
  r = run("PYTORCH_NPU_ALLOC_CONF=page_size:1g", "config");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("note:      PYTORCH_NPU_ALLOC_CONF: page_size:1g: no 1 GiB pages"),
            std::string::npos)
      << r.out;
  // One torch_npu refuses: refused with its reason.
  r = run("PYTORCH_NPU_ALLOC_CONF=expandable_segments:True,max_split_size_mb:64", "config");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot be enabled with `expandable_segments`"), std::string::npos) << r.err;
  r = run("MODELMEM_ALLOC_CONF=device:npu,strategy:static,static_pool_mb:64", "config");
  EXPECT_NE(r.out.find("(from MODELMEM_ALLOC_CONF)"), std::string::npos) << r.out;
}

TEST(NpuConfigCli, FallbackErrorRefuses) {
  Result r = run("MODELMEM_EMULATED_ACL_VMM=unsupported",
                 "config device:npu,expandable_segments:True,fallback:error");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("expandable_segments is not supported on npu:0"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fallback:error forbids building anything else"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("allocator:"), std::string::npos) << r.out;
}

TEST(NpuConfigCli, NoSuchNpuAndBadKeysAreOneLineErrors) {
  Result r = run("", "config device:npu:3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("npu:3: no such device (1 present)"), std::string::npos) << r.err;
  r = run("", "config device:npu:x");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("device: npu:N needs a device index"), std::string::npos) << r.err;
  r = run("", "config device:npu,huge_pages:True");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("huge_pages: applies only to host memory (device is npu)"),
            std::string::npos)
      << r.err;
  r = run("MODELMEM_ACL_LIBRARY=/nonexistent.so", "config device:npu");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no Ascend runtime here"), std::string::npos) << r.err;
}

TEST(NpuInfoCli, ShowsEveryNpuWithItsHbm) {
  Result r =
      run("MODELMEM_EMULATED_ACL_DEVICES=2 MODELMEM_EMULATED_ACL_MEMORY_MB=2048", "info --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("npu")) << r.out;
  EXPECT_EQ(j["npu"]["available"], true);
  EXPECT_EQ(j["npu"]["count"], 2);
  EXPECT_EQ(j["npu"]["library"], MODELMEM_EMULATED_ACL);
  int npus = 0;
  for (const auto& d : j["devices"]) {
    if (d["device"].get<std::string>().rfind("npu:", 0) != 0) continue;
    EXPECT_EQ(d["total"], 2048ull << 20);
    EXPECT_EQ(d["free"], 2048ull << 20);
    EXPECT_EQ(d["model"], "Ascend-emulated");
    ++npus;
  }
  EXPECT_EQ(npus, 2);

  r = run("MODELMEM_EMULATED_ACL_DEVICES=2", "info");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("npu:0: 1.0G total, 1.0G free, 0B used  Ascend-emulated"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("npu:1: 1.0G total"), std::string::npos) << r.out;
}

TEST(NpuInfoCli, WithoutARuntimeSaysSo) {
  Result r = run("MODELMEM_ACL_LIBRARY=/nonexistent/libascendcl.so", "info --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["npu"]["available"], false);
  EXPECT_NE(j["npu"]["reason"].get<std::string>().find("no Ascend runtime here"),
            std::string::npos);
  r = run("MODELMEM_ACL_LIBRARY=/nonexistent/libascendcl.so", "info");
  EXPECT_NE(r.out.find("npu: no Ascend runtime here"), std::string::npos) << r.out;
}

}  // namespace
