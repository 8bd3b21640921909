// The library's view of the machine and its renderings (monitor/view.hpp, monitor/render.hpp),
// on views built by hand: what `modelmem info`, `modelmem top` and modelmem.info_report print.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "modelmem/alloc/stats.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/render.hpp"
#include "modelmem/monitor/view.hpp"

namespace modelmem::monitor {
namespace {

PoolSnapshot pool(const std::string& name, std::uint64_t reserved, std::uint64_t count,
                  std::uint64_t bytes, std::uint64_t time_ns) {
  PoolSnapshot p;
  p.name = name;
  p.device = "host:0";
  p.strategy = "caching";
  p.reserved = reserved;
  p.allocated = reserved / 2;
  p.peak_allocated = reserved;
  p.alloc_count = count;
  p.alloc_bytes_total = bytes;
  p.update_time_ns = time_ns;
  return p;
}

MachineView view_of(std::vector<ProcessSnapshot> processes) {
  MachineView v;
  v.host = HostMemory{};
  v.host->total = 24ull << 30;
  v.host->available = 20ull << 30;
  v.scan.processes = std::move(processes);
  return v;
}

ProcessSnapshot process(std::int64_t pid, std::vector<PoolSnapshot> pools) {
  ProcessSnapshot p;
  p.pid = pid;
  p.process_name = "python3";
  p.command = "python3 serve.py --model \"a\"";
  p.start_time_ns = 1;
  p.pools = std::move(pools);
  return p;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(PoolRates, RatesComeFromSuccessiveLooksAndSurviveAStaleLook) {
  PoolRates rates;
  auto first = rates.update(view_of({process(7, {pool("a", kMiB, 100, 1000, 1'000'000'000)})}));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].alloc_rate, 0);  // seen for the first time
  auto second = rates.update(view_of({process(7, {pool("a", kMiB, 300, 5000, 3'000'000'000)})}));
  EXPECT_DOUBLE_EQ(second[0].alloc_rate, 100);  // 200 allocations in 2 s
  EXPECT_DOUBLE_EQ(second[0].byte_rate, 2000);
  // Not republished since (same time stamp): the last rate stays.
  auto third = rates.update(view_of({process(7, {pool("a", kMiB, 300, 5000, 3'000'000'000)})}));
  EXPECT_DOUBLE_EQ(third[0].alloc_rate, 100);
  // The same pid with a new start time is a new process: no rate yet.
  ProcessSnapshot reborn = process(7, {pool("a", kMiB, 900, 9000, 4'000'000'000)});
  reborn.start_time_ns = 2;
  EXPECT_EQ(rates.update(view_of({reborn}))[0].alloc_rate, 0);
}

TEST(PoolRows, SortByEveryFieldAndRefuseOthers) {
  PoolRates rates;
  auto rows = rates.update(view_of(
      {process(9, {pool("small", kMiB, 1, 1, 1)}), process(3, {pool("big", 8 * kMiB, 1, 1, 1)})}));
  sort_pool_rows(rows, "reserved");
  EXPECT_EQ(rows[0].pool.name, "big");
  sort_pool_rows(rows, "pid");
  EXPECT_EQ(rows[0].pid, 3);
  sort_pool_rows(rows, "pool");
  EXPECT_EQ(rows[0].pool.name, "big");
  for (const auto& f : pool_sort_fields()) EXPECT_NO_THROW(sort_pool_rows(rows, f));
  EXPECT_THROW(sort_pool_rows(rows, "size"), InvalidInput);
}

TEST(InfoTable, ShowsPoolsCommandsPlansAndWarnings) {
  PoolSnapshot planned = pool("planned", 4 * kMiB, 1, 1, 1);
  planned.strategy = "planned";
  planned.plan_hits = 120;
  planned.plan_misses = 3;
  PoolSnapshot warned = pool("a-very-long-pool-name", kMiB, 1, 1, 1);
  warned.warning_count = 1;
  warned.warning = "expandable segments unavailable: caching";
  warned.budget = 8 * kMiB;
  const std::string t = info_table(view_of({process(42, {planned, warned})}));
  const auto lines = lines_of(t);
  EXPECT_EQ(lines[0].rfind("modelmem info  ", 0), 0u);
  EXPECT_EQ(lines[1], "host: 24.0G total, 20.0G available, 4.0G used, 0B shared memory");
  EXPECT_NE(t.find("42       python3         planned"), std::string::npos) << t;
  EXPECT_NE(t.find("a-very-long-p~"), std::string::npos) << t;  // cut to 14 columns
  EXPECT_NE(t.find("    8.0M\n"), std::string::npos) << t;      // the budget column
  EXPECT_NE(t.find("Commands:\n  42       python3 serve.py"), std::string::npos) << t;
  EXPECT_NE(t.find("pid 42 pool planned: 120 hits, 3 misses; peak reserved 0B"), std::string::npos)
      << t;
  EXPECT_NE(t.find("Fallback warnings:\n  pid 42 pool a-very-long-pool-name: expandable"),
            std::string::npos)
      << t;
  EXPECT_NE(info_table(view_of({})).find("No process is publishing modelmem pools."),
            std::string::npos);
}

TEST(InfoJson, HoldsEveryPoolFieldUnderTheCliNames) {
  PoolSnapshot p = pool("enc", 2 * kMiB, 5, 50, 9);
  const auto j = nlohmann::json::parse(info_json(view_of({process(5, {p})})));
  ASSERT_EQ(j["processes"].size(), 1u);
  const auto& proc = j["processes"][0];
  EXPECT_EQ(proc["pid"], 5);
  EXPECT_EQ(proc["command"], "python3 serve.py --model \"a\"");
  const auto& q = proc["pools"][0];
  EXPECT_EQ(q["pool"], "enc");
  EXPECT_EQ(q["reserved"], 2 * kMiB);
  EXPECT_EQ(q["allocations_total"], 5);
  EXPECT_EQ(q["allocated_bytes_total"], 50);
  EXPECT_TRUE(j["devices"].is_array());
  EXPECT_FALSE(j.contains("npu"));  // devices were not asked
  EXPECT_EQ(info_json(view_of({})).back(), '\n');
}

TEST(InfoPrometheus, EscapesLabelValues) {
  PoolSnapshot p = pool("we\"ird\\name", kMiB, 1, 1, 1);
  const std::string text = info_prometheus(view_of({process(5, {p})}));
  EXPECT_NE(text.find("# TYPE modelmem_host_memory_total_bytes gauge"), std::string::npos);
  EXPECT_NE(text.find("we\\\"ird\\\\name"), std::string::npos) << text;
}

TEST(InfoReport, PicksTheRenderingByNameAndRefusesOthers) {
  const MachineView v = view_of({process(5, {pool("enc", kMiB, 1, 1, 1)})});
  EXPECT_EQ(info_report(v, "json"), info_json(v));
  EXPECT_EQ(info_report(v, "prometheus"), info_prometheus(v));
  EXPECT_NE(info_report(v, "table").find("enc"), std::string::npos);
  try {
    info_report(v, "yaml");
    ADD_FAILURE() << "yaml accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("info format 'yaml'"), std::string::npos) << e.what();
  }
}

TEST(TopFrame, FitsTheTerminalAndSaysWhatItLeftOut) {
  std::vector<PoolSnapshot> pools;
  for (int i = 0; i < 30; ++i)
    pools.push_back(pool("p" + std::to_string(i), kMiB * (i + 1), 1, 1, 1));
  MachineView v = view_of({process(11, pools)});
  PoolRates rates;
  TopFrame frame;
  frame.height = 24;
  frame.width = 80;
  const auto lines = lines_of(top_frame(v, rates.update(v), frame));
  ASSERT_EQ(lines.size(), 24u);
  for (const auto& l : lines) EXPECT_LE(l.size(), 80u) << l;
  EXPECT_NE(lines[0].find("sort:reserved  1 proc 30 pools"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[3].substr(0, 7), "PID    ");                     // title, host, blank, header
  EXPECT_NE(lines[4].find("p29"), std::string::npos) << lines[4];  // largest first
  EXPECT_EQ(lines.back(), "... 11 more pools");                    // 19 of 30 shown
  frame.sort = "bogus";
  EXPECT_THROW(top_frame(v, rates.update(v), frame), InvalidInput);
}

// FRAG is the share of the pool free outside its largest free block: a pool wasting 8 % in small
// pieces shows at most 0.08 (it showed 0.95 as 1 - largest / free), and info and top say what
// FRAG is where they show it.
TEST(Frag, IsTheShareOfThePoolFreeOutsideItsLargestBlockAndIsExplainedWhereShown) {
  alloc::Stats st;
  st.reserved_bytes.all.current = 100 * kMiB;
  st.allocated_bytes.all.current = 92 * kMiB;
  st.largest_free_block = 410 * 1024;  // 0.4 MiB: the 8 MiB free is in small pieces
  PoolSnapshot p = snapshot_of(st, {"bert", "host:0", "caching", 0});
  EXPECT_NEAR(p.fragmentation, (8.0 - 0.400390625) / 100.0, 1e-9);
  st.largest_free_block = 8 * kMiB;  // all free memory in one block
  EXPECT_EQ(snapshot_of(st, {"bert", "host:0", "caching", 0}).fragmentation, 0.0);
  st.allocated_bytes.all.current = 100 * kMiB;  // nothing free
  st.largest_free_block = 0;
  EXPECT_EQ(snapshot_of(st, {"bert", "host:0", "caching", 0}).fragmentation, 0.0);
  st.reserved_bytes.all.current = 0;
  st.allocated_bytes.all.current = 0;
  EXPECT_EQ(snapshot_of(st, {"bert", "host:0", "caching", 0}).fragmentation, 0.0);

  PoolSnapshot shown = pool("bert", 100 * kMiB, 1, 1, 1);
  shown.fragmentation = 0.076;
  const MachineView v = view_of({process(7, {shown})});
  const std::string t = info_table(v);
  EXPECT_NE(t.find("  0.08 "), std::string::npos) << t;
  EXPECT_NE(t.find("FRAG = (RESERVED - ALLOCATED - LARGEST) / RESERVED: the share of the pool "
                   "free only in pieces outside its largest free block\n"),
            std::string::npos)
      << t;
  PoolRates rates;
  TopFrame frame;
  frame.height = 24;
  frame.width = 80;
  const auto lines = lines_of(top_frame(v, rates.update(v), frame));
  EXPECT_EQ(lines.back(), "FRAG: share of RESV free outside the largest free block");
  EXPECT_EQ(info_table(view_of({})).find("FRAG ="), std::string::npos);
}

}  // namespace
}  // namespace modelmem::monitor
