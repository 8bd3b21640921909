// Publishing a process's pools in shared memory for `modelmem info` / `top`
// (monitor/publisher.hpp).
#include "modelmem/monitor/publisher.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/monitor/reader.hpp"

namespace modelmem::monitor {
namespace {

std::uint64_t clamp(std::int64_t v) {
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);
}

std::string first_word(const std::string& s) {
  std::size_t end = s.find_first_of(" :(,\t");
  return s.substr(0, end);
}

PublisherOptions options_from_env(PublisherOptions base) {
  if (const char* on = std::getenv("MODELMEM_MONITOR"); on && *on) {
    std::string v = on;
    if (v == "0" || v == "false" || v == "False" || v == "off") base.enabled = false;
  }
  if (const char* ms = std::getenv("MODELMEM_MONITOR_INTERVAL_MS"); ms && *ms) {
    unsigned long value = 0;
    auto [end, ec] = std::from_chars(ms, ms + std::strlen(ms), value);
    if (ec != std::errc() || *end != 0 || value == 0 || value > 3600000) {
      std::fprintf(stderr,
                   "modelmem: warning: MODELMEM_MONITOR_INTERVAL_MS='%s' is not a number of "
                   "milliseconds in 1..3600000; using %lld\n",
                   ms, static_cast<long long>(base.interval.count()));
    } else {
      base.interval = std::chrono::milliseconds(value);
    }
  }
  return base;
}

struct Entry {
  std::uint64_t id;
  std::weak_ptr<const alloc::Allocator> allocator;
  PoolInfo info;
  SnapshotFill fill;
};

// The process-wide publisher. Deliberately never destroyed: registrations held by static objects
// may be released after exit handlers ran, and must find a live object then.
class Publisher {
 public:
  static Publisher& instance() {
    static Publisher* p = [] {
      auto* q = new Publisher();
      pthread_atfork([] { instance().before_fork(); }, [] { instance().after_fork_parent(); },
                     [] { instance().after_fork_child(); });
      return q;
    }();
    return *p;
  }

  std::uint64_t add(std::shared_ptr<const alloc::Allocator> allocator, PoolInfo info,
                    SnapshotFill fill) {
    std::unique_lock lock(mu_);
    if (exiting_) return 0;
    if (!resolved_) resolve_options();
    if (!effective_.enabled) return 0;
    if (!ensure_segment_locked()) return 0;
    // A thread just started is running when add() returns: a fork() right after it must not
    // find it inside its start-up, possibly holding a lock of an allocator that is not
    // fork-safe (AddressSanitizer's), which the child would inherit held.
    cv_.wait(lock, [this] { return thread_ == nullptr || thread_running_; });
    std::uint64_t id = next_id_++;
    entries_.push_back(Entry{id, allocator, std::move(info), std::move(fill)});
    wake_ = true;
    cv_.notify_all();
    return id;
  }

  void remove(std::uint64_t id) noexcept {
    std::unique_lock lock(mu_);
    auto it =
        std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
    if (it == entries_.end()) return;
    entries_.erase(it);
    wake_ = true;
    cv_.notify_all();
  }

  void configure(const PublisherOptions& o) {
    std::unique_lock lock(mu_);
    configured_ = o;
    resolved_ = false;
  }

  PublisherOptions options() {
    std::unique_lock lock(mu_);
    if (!resolved_) resolve_options();
    return effective_;
  }

  std::string segment() {
    std::unique_lock lock(mu_);
    return base_ != nullptr ? name_ : std::string();
  }

  void publish_now() { update(); }

  void shutdown() noexcept {
    std::thread* t = nullptr;
    {
      std::unique_lock lock(mu_);
      stop_ = true;
      cv_.notify_all();
      t = thread_;
      thread_ = nullptr;
    }
    if (t != nullptr) {
      if (t->joinable()) t->join();
      delete t;
    }
    std::unique_lock wlock(write_mu_);
    std::unique_lock lock(mu_);
    close_segment_locked(/*unlink=*/true);
    entries_.clear();
    stop_ = false;
  }

  void at_exit() noexcept {
    {
      std::unique_lock lock(mu_);
      exiting_ = true;
    }
    shutdown();
  }

 private:
  Publisher() = default;

  void resolve_options() {
    // An explicit configure() wins over the environment.
    effective_ = configured_ ? *configured_ : options_from_env(PublisherOptions{});
    effective_.capacity = std::clamp<std::size_t>(effective_.capacity, 1, kMaxPoolCapacity);
    if (effective_.interval.count() <= 0) effective_.interval = std::chrono::milliseconds(200);
    resolved_ = true;
  }

  bool ensure_segment_locked() {
    if (base_ != nullptr && owner_pid_ == getpid()) return true;
    if (failed_) return false;
    std::int64_t pid = getpid();
    std::uint64_t uid = geteuid();
    std::string name = segment_name(uid, pid);
    std::size_t bytes = segment_bytes(effective_.capacity);
    if (owner_pid_ == 0 && !reclaimed_) {
      // Every publisher removes the segments of this user's dead processes (killed by a
      // signal, they could not) when it starts, so none pile up between two `info` runs.
      reclaimed_ = true;
      ScanOptions reclaim;
      reclaim.max_wait_us = 0;
      scan(reclaim);
    }
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      // Left by an earlier process with the same pid (killed, or in another pid namespace
      // sharing /dev/shm): it is ours to replace only if we own it.
      int old = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
      struct stat st {};
      bool ours = old >= 0 && fstat(old, &st) == 0 && st.st_uid == uid;
      if (old >= 0) close(old);
      if (ours) {
        shm_unlink(name.c_str());
        fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      }
    }
    // Taken by someone else (another user can create any name in /dev/shm): a name with a
    // random part nobody can guess in advance instead.
    for (int attempt = 0; fd < 0 && errno == EEXIST && attempt < 8; ++attempt) {
      std::random_device random;
      char suffix[24];
      std::snprintf(suffix, sizeof suffix, ".r%08x%08x", random(), random());
      const std::string other = segment_name(uid, pid) + suffix;
      fd = shm_open(other.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (fd >= 0) name = other;
    }
    if (fd < 0) return fail("cannot create " + name + ": " + std::strerror(errno));
    // The umask may have removed bits, never added any; make the mode exactly 0600.
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int err = errno;
      close(fd);
      shm_unlink(name.c_str());
      return fail("cannot size " + name + ": " + std::strerror(err));
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      shm_unlink(name.c_str());
      return fail("cannot map " + name + ": " + std::strerror(errno));
    }
    base_ = base;
    bytes_ = bytes;
    name_ = name;
    owner_pid_ = pid;
    writer_.emplace(
        base, effective_.capacity, pid, uid, this_process_name(), process_start_ticks(pid),
        static_cast<std::uint64_t>(effective_.interval.count()), this_process_command());
    if (!atexit_registered_) {
      atexit_registered_ = true;
      std::atexit([] { instance().at_exit(); });
    }
    thread_running_ = false;
    thread_ = new std::thread([this] { run(); });
    return true;
  }

  bool fail(const std::string& why) {
    failed_ = true;
    std::fprintf(stderr, "modelmem: warning: monitor publishing off: %s\n", why.c_str());
    return false;
  }

  void close_segment_locked(bool unlink) noexcept {
    if (base_ == nullptr) return;
    writer_.reset();
    munmap(base_, bytes_);
    if (unlink && owner_pid_ == getpid()) shm_unlink(name_.c_str());
    base_ = nullptr;
    name_.clear();
    owner_pid_ = 0;
  }

  void run() {
    std::unique_lock lock(mu_);
    thread_running_ = true;
    cv_.notify_all();
    while (!stop_) {
      auto interval = effective_.interval;
      cv_.wait_for(lock, interval, [this] { return stop_ || wake_; });
      if (stop_) break;
      wake_ = false;
      lock.unlock();
      update();
      lock.lock();
    }
  }

  // Copies statistics without holding mu_: an allocator's stats() takes its own lock, and the
  // last strong reference may be dropped here, running a destructor that unregisters pools.
  void update() {
    // One update at a time, start to end: otherwise an update that took its pools before an
    // allocator was dropped could write after one that saw it gone (a stale segment), and an
    // allocator kept alive by the other update's copy would still be published.
    std::unique_lock ulock(update_mu_);
    struct Live {
      std::shared_ptr<const alloc::Allocator> allocator;
      PoolInfo info;
      SnapshotFill fill;
    };
    std::vector<Live> live;
    {
      std::unique_lock lock(mu_);
      if (base_ == nullptr) return;
      std::vector<std::uint64_t> expired;
      for (const Entry& e : entries_) {
        if (auto a = e.allocator.lock()) {
          live.push_back(Live{std::move(a), e.info, e.fill});
        } else {
          expired.push_back(e.id);
        }
      }
      std::erase_if(entries_, [&](const Entry& e) {
        return std::find(expired.begin(), expired.end(), e.id) != expired.end();
      });
    }
    std::vector<PoolSnapshot> pools;
    pools.reserve(live.size());
    std::uint64_t now = wall_clock_ns();
    for (auto& [allocator, info, fill] : live) {
      PoolInfo filled = info;
      if (filled.strategy.empty()) filled.strategy = first_word(allocator->describe());
      PoolSnapshot s = snapshot_of(allocator->stats(), filled);
      if (fill) fill(s);
      s.update_time_ns = now;
      pools.push_back(std::move(s));
    }
    {
      std::unique_lock wlock(write_mu_);
      std::unique_lock lock(mu_);
      if (writer_ && owner_pid_ == getpid()) writer_->write(pools, now);
    }
    live.clear();  // may run destructors (which may unpublish: mu_, not held here)
  }

  void before_fork() {
    update_mu_.lock();
    write_mu_.lock();
    mu_.lock();
  }
  void after_fork_parent() {
    mu_.unlock();
    write_mu_.unlock();
    update_mu_.unlock();
  }
  void after_fork_child() {
    // The thread did not survive the fork; its object can be neither joined nor destroyed
    // (a joinable std::thread terminates on destruction), so it is parked where it stays
    // reachable for the child's lifetime. The mapping is the parent's: drop it without
    // removing the name.
    orphaned_after_fork_ = thread_;
    // The condition variable still counts the parent's thread as a waiter, which no thread
    // here will ever end: a notify would wait for it forever. Nobody waits on it in the child,
    // so a fresh one is built in its place (not destroyed: destruction waits for waiters too).
    new (&cv_) std::condition_variable();
    thread_ = nullptr;
    writer_.reset();
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = nullptr;
    name_.clear();
    owner_pid_ = 0;
    entries_.clear();
    failed_ = false;
    mu_.unlock();
    write_mu_.unlock();
    update_mu_.unlock();
  }

  std::mutex update_mu_;  // one update() at a time; taken before write_mu_
  std::mutex write_mu_;   // orders writers of the segment; taken before mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  std::uint64_t next_id_ = 1;
  std::optional<PublisherOptions> configured_;
  PublisherOptions effective_;
  bool resolved_ = false;
  bool failed_ = false;
  bool reclaimed_ = false;  // stale segments removed once, by the first segment made
  bool stop_ = false;
  bool wake_ = false;
  bool thread_running_ = false;  ///< thread_ has entered run()
  bool exiting_ = false;
  bool atexit_registered_ = false;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
  std::int64_t owner_pid_ = 0;
  std::optional<SegmentWriter> writer_;
  std::thread* thread_ = nullptr;
  std::thread* orphaned_after_fork_ = nullptr;  ///< the parent's thread object, in a child
};

}  // namespace

PoolRegistration& PoolRegistration::operator=(PoolRegistration&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

void PoolRegistration::reset() noexcept {
  if (id_ != 0) Publisher::instance().remove(id_);
  id_ = 0;
}

PoolRegistration publish(std::shared_ptr<const alloc::Allocator> allocator, PoolInfo info,
                         SnapshotFill fill) {
  if (!allocator) return PoolRegistration();
  return PoolRegistration(
      Publisher::instance().add(std::move(allocator), std::move(info), std::move(fill)));
}

void configure(const PublisherOptions& options) {
  Publisher::instance().configure(options);
}
PublisherOptions options() {
  return Publisher::instance().options();
}
void publish_now() {
  Publisher::instance().publish_now();
}
void shutdown() noexcept {
  Publisher::instance().shutdown();
}
std::string current_segment() {
  return Publisher::instance().segment();
}

PoolSnapshot snapshot_of(const alloc::Stats& stats, const PoolInfo& info) {
  PoolSnapshot s;
  s.name = info.name;
  s.device = info.device.empty() ? "?" : info.device;
  s.strategy = info.strategy;
  s.budget = info.budget;
  s.reserved = clamp(stats.reserved_bytes.all.current);
  s.allocated = clamp(stats.allocated_bytes.all.current);
  s.peak_allocated = clamp(stats.allocated_bytes.all.peak);
  s.peak_reserved = clamp(stats.reserved_bytes.all.peak);
  s.requested = clamp(stats.requested_bytes.all.current);
  s.largest_free_block = stats.largest_free_block;
  s.fragmentation = stats.fragmentation();
  s.oom_count = clamp(stats.num_ooms);
  s.alloc_retries = clamp(stats.num_alloc_retries);
  s.warning_count = stats.warnings.size();
  if (!stats.warnings.empty()) s.warning = stats.warnings.front();
  s.alloc_count = clamp(stats.allocation.all.allocated);
  s.alloc_bytes_total = clamp(stats.allocated_bytes.all.allocated);
  s.free_bytes_total = clamp(stats.allocated_bytes.all.freed);
  s.segments = clamp(stats.segment.all.current);
  if (stats.planned) {
    s.plan_hits = stats.planned->hits;
    s.plan_misses = stats.planned->misses;
  }
  return s;
}

std::uint64_t process_start_ticks(std::int64_t pid) noexcept {
  try {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return 0;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    std::size_t close = line.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    // Fields 3.. follow; the start time is field 22.
    for (int i = 3; i <= 22; ++i) {
      if (!(rest >> field)) return 0;
    }
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
    return ec == std::errc() ? v : 0;
  } catch (...) {
    return 0;
  }
}

std::string this_process_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& c : all)
    if (c == '\0') c = ' ';
  return all;
}

std::string this_process_name() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "?" : name;
}

}  // namespace modelmem::monitor
