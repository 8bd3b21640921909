// The runtime core with nothing but the standard library: publishing a pool and reading it back
// through the monitor's shared-memory segment.
#include <unistd.h>

#include <memory>

#include "check.hpp"
#include "modelmem/alloc/allocator.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"

namespace {

class FixedStats : public modelmem::alloc::Allocator {
 public:
  void* do_allocate(std::size_t, modelmem::alloc::Stream) override { return nullptr; }
  void do_deallocate(void*) override {}
  modelmem::alloc::Stats do_stats() const override {
    modelmem::alloc::Stats s;
    s.reserved_bytes.all.add(3 << 20);
    s.allocated_bytes.all.add(1 << 20);
    return s;
  }
  void do_reset_peak() override {}
  std::string do_describe() const override { return "fixed"; }
  modelmem::alloc::LiveBlock do_block(const void*) const override { return {}; }
};

}  // namespace

int main() {
  using namespace modelmem;
  auto a = std::make_shared<FixedStats>();
  {
    auto reg = monitor::publish(a, {"minimal", "host:0", "", 0});
    MM_CHECK(reg.active());
    monitor::publish_now();
    monitor::ScanOptions o;
    o.pid = getpid();
    monitor::Scan s = monitor::scan(o);
    MM_CHECK(s.processes.size() == 1);
    if (s.processes.size() == 1) {
      MM_CHECK(s.processes[0].pools.size() == 1);
      if (!s.processes[0].pools.empty()) {
        MM_CHECK(s.processes[0].pools[0].name == "minimal");
        MM_CHECK(s.processes[0].pools[0].reserved == (3u << 20));
        MM_CHECK(s.processes[0].pools[0].allocated == (1u << 20));
        MM_CHECK(s.processes[0].pools[0].strategy == "fixed");
      }
    }
  }
  monitor::shutdown();
  monitor::ScanOptions o;
  o.pid = getpid();
  MM_CHECK(monitor::scan(o).processes.empty());
  return minimal::finish("minimal.core");
}
