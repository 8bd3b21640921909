// Real PyTorch snapshots (MODELMEM_SHARED_DATA/real/, origin of each in README.txt there): read
// as PyTorch reads them. Each test skips with a message where the shared data is absent; the
// synthetic pools.pickle (make_snapshots.py) and the frame rules run everywhere.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/device/limited.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/replay.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/viz.hpp"

namespace modelmem::trace {
namespace {

namespace fs = std::filesystem;
using alloc::EventKind;

constexpr std::size_t kMiBytes = std::size_t{1} << 20;

fs::path real_file(const std::string& name) {
  return fs::path(MODELMEM_SHARED_DATA) / "real" / name;
}

#define REQUIRE_REAL(path)                                                         \
  if (!fs::exists(path))                                                           \
  GTEST_SKIP() << (path).string()                                                  \
               << " is absent: the real snapshots live in the shared data folder " \
                  "(MODELMEM_SHARED_DATA/real), not in the repository"

// PyTorch's own totals, from README.txt beside the files (each checked there with a
// restricted unpickler: segments' total_size, active_allocated blocks' size).
struct Expected {
  const char* file;
  std::size_t reserved;
  std::size_t allocated;
  std::size_t segments;
};
const Expected kReal[] = {
    {"verl_vllm_megatron_mem.pickle", 26'189'234'176, 24'916'034'560, 127},
    {"cs336_magma_memory_snapshot.pickle", 14'180'941'824, 1'377'753'600, 216},
    {"decomfl_memory.pickle", 1'897'922'560, 1'014'430'208, 61},
    {"flexgen_opt_oom_snapshot.pickle", 11'844'714'496, 11'840'159'744, 176},
    {"sketchkv_llm_inference_snapshot.pickle", 17'133'731'840, 16'397'578'240, 259},
};

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

class RealSnapshot : public ::testing::TestWithParam<Expected> {};

TEST_P(RealSnapshot, TotalsEqualPyTorchsAndEveryCommandRuns) {
  const Expected& x = GetParam();
  const fs::path path = real_file(x.file);
  REQUIRE_REAL(path);
  const Trace t = read_trace(path);
  ASSERT_TRUE(t.snapshot);
  EXPECT_EQ(t.snapshot->reserved(), x.reserved);
  EXPECT_EQ(t.snapshot->allocated(), x.allocated);
  EXPECT_LE(t.snapshot->requested(), t.snapshot->allocated());
  std::size_t segments = 0;
  for (const SnapshotPool& p : t.snapshot->pools) {
    segments += p.segments;
    EXPECT_LE(p.allocated, p.reserved) << p.id;
  }
  EXPECT_EQ(segments, x.segments);
  // Every event's pool is one of the snapshot's.
  for (const TraceEvent& e : t.events) ASSERT_LT(e.pool, t.snapshot->pools.size());
  // Histories PyTorch wrote are consistent: none of the notes a hostile snapshot gets.
  for (const std::string& w : t.warnings)
    for (const char* inconsistent :
         {"double free", "overlapping a live block", "wraps past", "out of time order"})
      EXPECT_EQ(w.find(inconsistent), std::string::npos) << w;

  // analyze: the pools and totals in its text and JSON, requested said apart.
  const Analysis a = analyze(t);
  const std::string text = to_text(a);
  EXPECT_NE(text.find("pools at the snapshot"), std::string::npos);
  EXPECT_NE(text.find("(requested bytes)"), std::string::npos);
  std::string reserved_digits = std::to_string(x.reserved);
  for (std::size_t i = reserved_digits.size(); i > 3; i -= 3) reserved_digits.insert(i - 3, ",");
  EXPECT_NE(text.find("reserved " + reserved_digits), std::string::npos) << text;
  const auto j = to_json(a);
  EXPECT_EQ(j["snapshot"]["allocated"].get<std::size_t>(), x.allocated);
  // The static pool is sized by replays on the snapshot's simulated device, whatever this
  // host has.
  EXPECT_GT(a.static_pool_bytes, a.peak_live);

  // replay: every strategy, on the simulated device, with no OOM (capacity not stated).
  ReplayRequest request;
  request.trace = path.string();
  const ReplayReport report = run_replay(request);
  ASSERT_EQ(report.results.size(), replay_strategies().size());
  for (const ReplayResult& r : report.results) {
    EXPECT_EQ(r.ooms, 0u) << r.strategy;
    EXPECT_GE(r.peak_reserved, r.peak_live) << r.strategy;
  }
  EXPECT_NE(report.device.find("simulated"), std::string::npos);

  // viz: one series per pool, named as analyze names it.
  std::ostringstream html;
  write_viz_html(t, html);
  EXPECT_NE(html.str().find("\"name\":\"pool 0 "), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Real, RealSnapshot, ::testing::ValuesIn(kReal), [](const auto& info) {
  std::string n = info.param.file;
  return n.substr(0, n.find('_'));
});

TEST(RealSnapshotVerl, ThreePoolsOneAKvCacheAndReplaysNeedNoHostMemory) {
  const fs::path path = real_file("verl_vllm_megatron_mem.pickle");
  REQUIRE_REAL(path);
  const Trace t = read_trace(path);
  ASSERT_EQ(t.snapshot->pools.size(), 3u);
  std::map<std::string, SnapshotPool> by_id;
  for (const SnapshotPool& p : t.snapshot->pools) by_id[p.id] = p;
  EXPECT_EQ(by_id["(0,0)"].kind, "default");
  EXPECT_EQ(by_id["(0,0)"].reserved, 3'810'525'184u);
  EXPECT_EQ(by_id["(0,1)"].kind, "private");
  EXPECT_EQ(by_id["(0,1)"].reserved, 585'105'408u);
  EXPECT_EQ(by_id["(0,2)"].kind, "KV cache");
  EXPECT_EQ(by_id["(0,2)"].reserved, 21'793'603'584u);
  EXPECT_EQ(by_id["(0,2)"].allocated, 21'793'603'584u);
  EXPECT_EQ(by_id["(0,2)"].top_site, "cache_engine.py:83 _allocate_kv_cache");
  EXPECT_GT(t.snapshot->pending_free(), 0u);  // active_pending_free: not allocated

  // The program's frame, not PyTorch's: no site of PyTorch or the C++ runtime.
  const auto sites = allocation_sites(t, 1000);
  ASSERT_FALSE(sites.empty());
  EXPECT_EQ(sites[0].site, "cache_engine.py:83 _allocate_kv_cache");
  for (const AllocationSite& s : sites) {
    EXPECT_EQ(s.site.find("memory_snapshot.cpp"), std::string::npos) << s.site;
    EXPECT_EQ(s.site.find("_device.py"), std::string::npos) << s.site;  // torch/utils
  }

  // 26 GB of static pool sized on the simulated device: no host memory taken.
  const long rss_before = max_rss_kib();
  const Analysis a = analyze(t);
  bool sized = false;
  for (const Advice& adv : a.advice)
    sized = sized || (adv.topic == "static-pool" && !adv.config.empty());
  EXPECT_TRUE(sized) << to_text(a);
  EXPECT_EQ(a.static_pool_bytes, std::size_t{26108} * kMiBytes);
  EXPECT_LT(max_rss_kib() - rss_before, 1L << 20) << "KiB of host memory touched";

  // A stated device of 20 GiB cannot hold the program: replays say OOM, no static pool fits.
  AnalyzeOptions small;
  small.device_capacity = 20 * (std::size_t{1} << 30);
  const Analysis s = analyze(t, small);
  for (const Advice& adv : s.advice)
    if (adv.topic == "static-pool") {
      EXPECT_TRUE(adv.config.empty());
      EXPECT_NE(adv.message.find("exceeds snapshot:0's 20.00 GiB"), std::string::npos)
          << adv.message;
    }
  ReplayRequest request;
  request.trace = path.string();
  request.strategy = "caching";
  request.device_capacity = small.device_capacity;
  EXPECT_GT(run_replay(request).results.at(0).ooms, 0u);
}

TEST(RealSnapshotSites, SkipPyTorchTheStdlibAndWindowsPaths) {
  for (const char* name : {"decomfl_memory.pickle", "cs336_magma_memory_snapshot.pickle",
                           "flexgen_opt_oom_snapshot.pickle"}) {
    const fs::path path = real_file(name);
    REQUIRE_REAL(path);
    SCOPED_TRACE(name);
    const Trace t = read_trace(path);
    for (const AllocationSite& s : allocation_sites(t, 1000)) {
      for (const char* not_program :
           {"module.py:", "storage.py:", "functional.py:", "copy.py:", "\\", "torch::"})
        EXPECT_EQ(s.site.find(not_program), std::string::npos) << s.site;
    }
  }
  // PyTorch 2.0's layout: the frames of a block's last 'history' entry.
  const fs::path flexgen = real_file("flexgen_opt_oom_snapshot.pickle");
  const Trace t = read_trace(flexgen);
  EXPECT_EQ(allocation_sites(t).at(0).site, "pytorch_backend.py:190 allocate");
  ASSERT_EQ(t.snapshot->pools.size(), 1u);
  EXPECT_EQ(t.snapshot->pools[0].id, "");  // no segment_pool_id before 2.1
}

TEST(RealSnapshotDecomfl, ExternalAnnotationsMarkTheSteps) {
  const fs::path path = real_file("decomfl_memory.pickle");
  REQUIRE_REAL(path);
  const Trace t = read_trace(path);
  EXPECT_EQ(t.snapshot->annotations, 8u);
  EXPECT_EQ(t.snapshot->step_annotation, "Optimizer.zero_grad#SGD.zero_grad");
  std::size_t begins = 0;
  for (const TraceEvent& e : t.events)
    begins += e.kind == EventKind::kMark && e.label == "step_begin";
  EXPECT_EQ(begins, 2u);
  const Analysis a = analyze(t);
  EXPECT_TRUE(a.steps_from_marks);
  EXPECT_EQ(a.steps.size(), 2u);
}

// The synthetic snapshot of make_snapshots.py: runs everywhere.
fs::path synthetic_pools() {
  static const fs::path path = [] {
    const fs::path d = fs::path(MODELMEM_BINARY_DIR) / "real_snapshot_test_data";
    const std::string cmd =
        MODELMEM_PYTHON " " MODELMEM_SOURCE_DIR "/tests/trace/make_snapshots.py " + d.string();
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
    return d / "pools.pickle";
  }();
  return path;
}

TEST(SnapshotPools, PoolIdsKvCachePendingFreesAndProfilerSteps) {
  const Trace t = read_trace(synthetic_pools());
  ASSERT_TRUE(t.snapshot);
  ASSERT_EQ(t.snapshot->pools.size(), 2u);
  const SnapshotPool& def = t.snapshot->pools[0];
  const SnapshotPool& kv = t.snapshot->pools[1];
  EXPECT_EQ(def.id, "(0,0)");
  EXPECT_EQ(def.kind, "default");
  EXPECT_EQ(def.reserved, 20 * kMiBytes);
  EXPECT_EQ(def.allocated, 2 * kMiBytes);
  EXPECT_EQ(def.requested, 2 * kMiBytes - 100);
  EXPECT_EQ(def.pending_free, kMiBytes);
  EXPECT_EQ(def.top_site, "train.py:7 build");  // a Windows path, below C++ and torch frames
  EXPECT_EQ(kv.id, "(0,1)");
  EXPECT_EQ(kv.kind, "KV cache");
  EXPECT_EQ(kv.top_site, "cache_engine.py:83 _allocate_kv_cache");
  // Events carry the pool of the segment that holds them.
  for (const TraceEvent& e : t.events)
    if (e.kind == EventKind::kAlloc) EXPECT_EQ(e.pool, e.size == 64 * kMiBytes ? 1u : 0u);
  // ProfilerStep#N wins over the zero_grad that repeats as often: START to END.
  EXPECT_EQ(t.snapshot->step_annotation, "ProfilerStep#");
  const Analysis a = analyze(t);
  EXPECT_TRUE(a.steps_from_marks);
  ASSERT_EQ(a.steps.size(), 3u);
  EXPECT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.steps[0].allocs, 1u);
}

TEST(SnapshotFrames, RuntimeAndProgramFrames) {
  EXPECT_TRUE(is_runtime_frame("memory_snapshot.cpp",
                               "torch::cuda::(anonymous namespace)::gather_with_cpp()"));
  EXPECT_TRUE(is_runtime_frame("", "at::TensorBase at::detail::_empty_generic<long>(x)"));
  EXPECT_TRUE(is_runtime_frame("??", "main"));
  EXPECT_TRUE(is_runtime_frame("<built-in>", "method add of Tensor"));
  EXPECT_TRUE(
      is_runtime_frame("python_torch_functions_2.cpp", "torch::autograd::THPVariable_empty"));
  EXPECT_TRUE(is_runtime_frame("crtstuff.c", "__libc_start_main"));
  EXPECT_TRUE(is_runtime_frame("D:\\a\\.venv\\Lib\\site-packages\\torch\\functional.py", "einsum"));
  EXPECT_TRUE(is_runtime_frame("/usr/lib/python3/dist-packages/torch_npu/npu/memory.py", "f"));
  EXPECT_TRUE(is_runtime_frame("/usr/lib/python3.10/copy.py", "deepcopy"));
  EXPECT_TRUE(
      is_runtime_frame("C:\\Users\\z\\AppData\\Roaming\\uv\\python\\cpython-3.10.19-windows-x86_64-"
                       "none\\lib\\copy.py",
                       "deepcopy"));
  EXPECT_FALSE(is_runtime_frame(
      "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py", "_allocate_kv_cache"));
  EXPECT_FALSE(is_runtime_frame("C:\\research\\DeComFL\\cezo_fl\\adam_forward.py", "step"));
  EXPECT_FALSE(is_runtime_frame("app.cpp", "myapp::Engine::load(at::Tensor)"));
  EXPECT_TRUE(is_kv_cache_site("/x/vllm/worker/cache_engine.py", "_allocate_kv_cache"));
  EXPECT_TRUE(is_kv_cache_site("/x/vllm/v1/worker/gpu_model_runner.py", "initialize_kv_cache"));
  EXPECT_TRUE(is_kv_cache_site("/x/sglang/srt/mem_cache/memory_pool.py", "_create_buffers"));
  EXPECT_FALSE(is_kv_cache_site("/x/vllm/model_executor/layers/linear.py", "create_weights"));
}

TEST(SimulatedDevice, HoldsItsCapacityWithoutHostMemory) {
  auto dev = device::make_simulated_device(64 * (std::size_t{1} << 30), "cuda:0");
  EXPECT_EQ(dev->name(), "cuda:0");
  EXPECT_FALSE(dev->host_accessible());
  EXPECT_EQ(dev->memory_info().total, 64 * (std::size_t{1} << 30));
  const long before = max_rss_kib();
  void* big = dev->allocate(48 * (std::size_t{1} << 30));  // more than many hosts have
  EXPECT_THROW(dev->allocate(17 * (std::size_t{1} << 30)), OutOfMemory);
  EXPECT_EQ(dev->memory_info().free, 16 * (std::size_t{1} << 30));
  dev->deallocate(big, 48 * (std::size_t{1} << 30));
  EXPECT_EQ(dev->memory_info().free, dev->memory_info().total);
  EXPECT_LT(max_rss_kib() - before, 1L << 16);
  ASSERT_TRUE(dev->probe_virtual_memory().supported);
  void* range = dev->reserve(128 * (std::size_t{1} << 30));
  dev->map(range, 60 * (std::size_t{1} << 30));
  EXPECT_THROW(
      dev->map(static_cast<char*>(range) + (std::size_t{60} << 30), 8 * (std::size_t{1} << 30)),
      OutOfMemory);
  dev->unmap(range, 60 * (std::size_t{1} << 30));
  dev->release(range, 128 * (std::size_t{1} << 30));
  EXPECT_THROW(device::make_simulated_device(0, "x"), InvalidInput);
}

}  // namespace
}  // namespace modelmem::trace
