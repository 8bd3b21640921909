// Allocation pairs on the caching pool (host device), with and without the monitor publisher
// copying its statistics every 1 ms (5x..200x more often than the default 200 ms).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/monitor/publisher.hpp"
using namespace modelmem;
double run(alloc::CachingAllocator& a, int n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    void* p = a.allocate(4096 + (i & 7) * 512);
    a.deallocate(p);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         n;
}
int main() {
  auto a = std::make_shared<alloc::CachingAllocator>(device::make_host_device());
  const int n = 2000000;
  run(*a, n);
  std::vector<double> off, on;
  monitor::PublisherOptions o;
  o.interval = std::chrono::milliseconds(1);
  monitor::configure(o);
  for (int round = 0; round < 5; ++round) {
    off.push_back(run(*a, n));
    auto reg = monitor::publish(a, {"bench", "host:0", "", 0});
    on.push_back(run(*a, n));
    reg.reset();
  }
  std::sort(off.begin(), off.end());
  std::sort(on.begin(), on.end());
  std::printf(
      "allocate+deallocate pair, median of 5 rounds x %d: without publisher %.1f ns, with "
      "publisher (1 ms interval) %.1f ns, ratio %.3f\n",
      n, off[2], on[2], on[2] / off[2]);
  std::printf("rounds without: ");
  for (double d : off) std::printf("%.1f ", d);
  std::printf("\nrounds with:    ");
  for (double d : on) std::printf("%.1f ", d);
  std::printf("\n");
}
