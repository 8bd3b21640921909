// MindSpore's memory_block.csv as a trace (files written here in its layout).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "../support/mindspore_tracker.hpp"
#include "modelmem/trace/trace.hpp"

using namespace modelmem;
using namespace modelmem::trace;

namespace {

Trace parse(const std::string& text) {
  std::istringstream in(text);
  return parse_trace(in, "memory_block.csv");
}

}  // namespace

TEST(MindSporeTrace, BlocksBecomeAllocsAndFreesInStampOrder) {
  Trace t = parse(test::example_run(2).text());
  EXPECT_EQ(t.format, "mindspore");
  ASSERT_EQ(t.events.size(), 3u + 2 * 4 + 2 * 4);  // weights never freed
  EXPECT_EQ(t.events[0].kind, alloc::EventKind::kAlloc);
  EXPECT_EQ(t.events[0].time_ns, 2000u);  // stamp 2 (a task came first), 1 us per tick
  EXPECT_EQ(t.events[0].address, 0x12c000000000u);
  EXPECT_EQ(t.events[0].label, "Default/network/fc0.weight");
  EXPECT_EQ(t.events[0].line, 2u);
  for (std::size_t i = 1; i < t.events.size(); ++i)
    EXPECT_LT(t.events[i - 1].time_ns, t.events[i].time_ns);
  Blocks b = match_blocks(t);
  EXPECT_EQ(b.unknown_frees, 0u);
  EXPECT_EQ(b.reused_live_addresses, 0u);
  EXPECT_EQ(peak_live_bytes(t, b), std::size_t{18} << 20);
}

TEST(MindSporeTrace, AddressesAreKeptApartAndFreesComeFirstAtOneStamp) {
  // Two blocks claim 0x1000 at once (and one has no address); block 3 is allocated at the stamp
  // block 1 is freed at.
  Trace t = parse(
      "start_time_stamp,end_time_stamp,device_addr,size,type,\n"
      "1,5,0x1000,512,WorkSpace,\n"
      "2,4,0x1000,256,WorkSpace,\n"
      "5,9223372036854775807,0,128,Weight,\n");
  ASSERT_EQ(t.events.size(), 5u);
  Blocks b = match_blocks(t);
  EXPECT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.reused_live_addresses, 0u);
  EXPECT_EQ(b.unknown_frees, 0u);
  EXPECT_NE(b.blocks[0].address, b.blocks[1].address);
  EXPECT_EQ(t.events[3].kind, alloc::EventKind::kFree);  // stamp 5: the free of block 1 first
  EXPECT_EQ(t.events[4].kind, alloc::EventKind::kAlloc);
  EXPECT_EQ(t.events[4].label, "Weight");  // no node_name: the type
  bool said = false;
  for (const std::string& w : t.warnings)
    said = said || w.find("1 blocks at an address a live block still held") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_EQ(peak_live_bytes(t, b), 768u);
}
