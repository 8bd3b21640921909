// Fuzzes the memory-snapshot reader (the pickle subset and the conversion to a trace). Any input
// must either convert or throw InvalidInput with a one-line message; nothing else may escape, and
// what converts must survive the CSV round trip and the analyses that read labels.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"

using namespace modelmem;
using namespace modelmem::trace;

#include <cstdio>

#define check(ok)                                                       \
  do {                                                                  \
    if (!(ok)) {                                                        \
      std::fprintf(stderr, "snapshot_fuzzer: check failed: %s\n", #ok); \
      std::abort();                                                     \
    }                                                                   \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Trace t;
  try {
    t = parse_snapshot(bytes, "fuzz.pickle");
  } catch (const InvalidInput& e) {
    check(std::string_view(e.what()).find('\n') == std::string_view::npos);
    return 0;
  }
  Blocks blocks = match_blocks(t);
  check(blocks.block_of_event.size() == t.events.size());
  auto sites = allocation_sites(t);
  (void)sites_text(sites);
  std::stringstream csv;
  write_csv(t, csv);
  Trace back = parse_trace(csv, "roundtrip.csv");
  check(back.events.size() == t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    check(back.events[i].kind == t.events[i].kind);
    check(back.events[i].size == t.events[i].size);
    check(back.events[i].label == t.events[i].label);
  }
  return 0;
}
