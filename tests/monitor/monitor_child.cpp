// A process with two named pools that publishes them, for the monitor tests. It prints
// "ready <pid> <segment>" once both pools are published, then runs until its stdin closes
// (normal exit: the segment must disappear) or it is killed (the segment becomes stale).
// With --churn it keeps allocating and freeing in pool "resnet" so `top` shows rates.
//
// The pools use a small exact-accounting allocator so the test knows every number it must see.
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"

namespace {

using modelmem::alloc::Stats;

// Serves blocks from a fixed budget ("reserved"), counting exactly; malloc underneath.
class CountingAllocator : public modelmem::alloc::Allocator {
 public:
  CountingAllocator(std::size_t reserved, std::string warning) : reserved_(reserved) {
    stats_.reserved_bytes.all.add(static_cast<std::int64_t>(reserved));
    stats_.segment.all.add(1);
    if (!warning.empty()) stats_.warnings.push_back(std::move(warning));
    stats_.largest_free_block = reserved;
  }
  ~CountingAllocator() override {
    for (auto& [p, n] : blocks_) std::free(p);
  }
  void* do_allocate(std::size_t size, modelmem::alloc::Stream = 0) override {
    std::lock_guard lock(mu_);
    auto used = static_cast<std::size_t>(stats_.allocated_bytes.all.current);
    if (size > reserved_ - used) {
      ++stats_.num_ooms;
      modelmem::OomInfo info;
      info.requested = size;
      info.reserved = reserved_;
      info.allocated = used;
      throw modelmem::OutOfMemory(info);
    }
    void* p = std::malloc(size);
    if (p == nullptr) throw std::bad_alloc();
    blocks_[p] = size;
    stats_.allocated_bytes.all.add(static_cast<std::int64_t>(size));
    stats_.requested_bytes.all.add(static_cast<std::int64_t>(size));
    stats_.allocation.all.add(1);
    stats_.largest_free_block = reserved_ - used - size;
    return p;
  }
  void do_deallocate(void* ptr) override {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) throw modelmem::InvalidInput("not ours");
    stats_.allocated_bytes.all.sub(static_cast<std::int64_t>(it->second));
    stats_.requested_bytes.all.sub(static_cast<std::int64_t>(it->second));
    stats_.allocation.all.sub(1);
    stats_.largest_free_block =
        reserved_ - static_cast<std::size_t>(stats_.allocated_bytes.all.current);
    std::free(it->first);
    blocks_.erase(it);
  }
  Stats do_stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void do_reset_peak() override {
    std::lock_guard lock(mu_);
    stats_.allocated_bytes.reset_peak();
  }
  std::string do_describe() const override {
    return "counting: reserved " + std::to_string(reserved_);
  }
  modelmem::alloc::LiveBlock do_block(const void* p) const override {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(const_cast<void*>(p));
    return it == blocks_.end() ? modelmem::alloc::LiveBlock{}
                               : modelmem::alloc::LiveBlock{it->second, 0, 0};
  }

 private:
  mutable std::mutex mu_;
  std::size_t reserved_;
  Stats stats_;
  std::map<void*, std::size_t> blocks_;
};

constexpr std::size_t kMiB = 1u << 20;

}  // namespace

int main(int argc, char** argv) {
  bool churn = argc > 1 && std::strcmp(argv[1], "--churn") == 0;
  auto resnet = std::make_shared<CountingAllocator>(64 * kMiB, "");
  auto bert = std::make_shared<CountingAllocator>(
      32 * kMiB, "expandable segments unavailable on limited:0 (no virtual memory)");

  // resnet: 3.5 MiB allocated, never more. bert: 8 MiB at peak, 4 MiB now, one OOM.
  resnet->allocate(kMiB);
  resnet->allocate(kMiB);
  resnet->allocate(kMiB);
  resnet->allocate(kMiB / 2);
  void* b1 = bert->allocate(4 * kMiB);
  bert->allocate(4 * kMiB);
  bert->deallocate(b1);
  try {
    bert->allocate(64 * kMiB);
  } catch (const modelmem::OutOfMemory&) {
  }

  auto r1 = modelmem::monitor::publish(resnet, {"resnet", "host:0", "", 64 * kMiB});
  auto r2 = modelmem::monitor::publish(bert, {"bert", "host:0", "caching", 0});
  if (!r1.active() || !r2.active()) {
    std::fprintf(stderr, "monitor_child: publishing is off\n");
    return 3;
  }
  modelmem::monitor::publish_now();
  std::printf("ready %d %s\n", static_cast<int>(getpid()),
              modelmem::monitor::current_segment().c_str());
  std::fflush(stdout);

  char buf[256];
  for (;;) {
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    int n = poll(&pfd, 1, churn ? 5 : 1000);
    if (n > 0) {
      ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
      if (got <= 0) break;  // stdin closed: exit normally
    }
    if (churn) {
      void* p = resnet->allocate(256 * 1024);
      resnet->deallocate(p);
    }
  }
  return 0;
}
