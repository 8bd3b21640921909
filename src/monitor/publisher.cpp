// Publishing a process's pools in shared memory for `modelmem info` / `top`
// (monitor/publisher.hpp).
#include "modelmem/monitor/publisher.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
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

// Where POSIX shared memory lives (shm_open's folder on Linux); segments are made there with
// open(2), whose flags say exactly how a name already taken is treated.
constexpr const char* kSegmentDirectory = "/dev/shm";

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
    return image_ != nullptr ? name_ : std::string();
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
    if (image_ != nullptr && owner_pid_ == getpid()) return true;
    if (failed_) return false;
    std::int64_t pid = getpid();
    std::uint64_t uid = geteuid();
    try {
      (void)segment_name(uid,
                         pid);  // a bad MODELMEM_MONITOR_NAMESPACE: one line, nothing published
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    std::size_t bytes = segment_bytes(effective_.capacity);
    if (owner_pid_ == 0 && !reclaimed_) {
      // Every publisher removes the segments of this user's dead processes (killed by a
      // signal, they could not) when it starts, so none pile up between two `info` runs.
      reclaimed_ = true;
      ScanOptions reclaim;
      reclaim.max_wait_us = 0;
      scan(reclaim);
    }
    std::string made, why;
    if (!make_file(pid, uid, bytes, made, why)) return fail(why);
    // The statistics are composed in private memory and copied into the file with pwrite:
    // a mapping of the file would die of SIGBUS when anyone truncated it.
    void* image = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (image == MAP_FAILED) {
      const int err = errno;
      unlink(path_.c_str());
      name_.clear();
      path_.clear();
      return fail("cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(err));
    }
    image_ = image;
    bytes_ = bytes;
    owner_pid_ = pid;
    writer_.emplace(
        image, effective_.capacity, pid, uid, this_process_name(), process_start_ticks(pid),
        static_cast<std::uint64_t>(effective_.interval.count()), this_process_command());
    if (!store_locked()) return false;
    if (!atexit_registered_) {
      atexit_registered_ = true;
      std::atexit([] { instance().at_exit(); });
    }
    thread_running_ = false;
    thread_ = new std::thread([this] { run(); });
    return true;
  }

  // Creates the segment file of process `pid`, its space allocated, and makes it the one
  // written (name_, path_, device_, inode_); `made` is its name. False with `why` when it cannot.
  bool make_file(std::int64_t pid, std::uint64_t uid, std::size_t bytes, std::string& made,
                 std::string& why) {
    std::string name = segment_name(uid, pid);
    std::string skipped;  // what stood at the plain name, when it was not ours
    const std::string plain = path_of(name);
    int fd = create_file(plain);
    if (fd < 0 && errno == EEXIST) {
      // Left by an earlier process with the same pid (killed, or in another pid namespace
      // sharing /dev/shm): ours to replace only when it is this user's regular file. Looked at
      // without opening it: a FIFO planted there would block an open, a link lead elsewhere.
      skipped = foreign_file(plain, static_cast<uid_t>(uid));
      if (skipped.empty()) {
        unlink(plain.c_str());
        fd = create_file(plain);
      } else {
        errno = EEXIST;
      }
    }
    // Taken by someone else (another user can create any name in /dev/shm): a name with a
    // random part nobody can guess in advance instead.
    for (int attempt = 0; fd < 0 && errno == EEXIST && attempt < 8; ++attempt) {
      std::random_device random;
      char suffix[24];
      std::snprintf(suffix, sizeof suffix, ".r%08x%08x", random(), random());
      const std::string other = segment_name(uid, pid) + suffix;
      fd = create_file(path_of(other));
      if (fd >= 0) name = other;
    }
    if (fd < 0) {
      why = "cannot create " + path_of(name) + ": " + std::strerror(errno) +
            (skipped.empty() ? "" : " (" + plain + " is " + skipped + ")");
      return false;
    }
    const std::string path = path_of(name);
    // The space is allocated before anything is written: a full /dev/shm (a container's 64 MiB
    // filled by other processes) is an error now, never a SIGBUS later. A file-size limit is
    // checked first, so that the allocation does not raise SIGXFSZ.
    int err = 0;
    struct rlimit fsize {};
    if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY &&
        fsize.rlim_cur < bytes) {
      err = EFBIG;
    } else if (fchmod(fd, 0600) != 0) {  // the umask may have removed bits, never added any
      err = errno;
    } else {
      err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    }
    struct stat st {};
    if (err == 0 && fstat(fd, &st) != 0) err = errno;
    close(fd);
    if (err != 0) {
      unlink(path.c_str());
      why = "cannot allocate " + std::to_string(bytes) + " bytes for " + path + ": " +
            std::strerror(err) + "; the program runs on without it";
      return false;
    }
    if (!skipped.empty()) {
      std::fprintf(stderr, "modelmem: warning: monitor: skipped %s: %s; publishing to %s\n",
                   plain.c_str(), skipped.c_str(), path.c_str());
    }
    made = name;
    name_ = name;
    path_ = path;
    device_ = st.st_dev;
    inode_ = st.st_ino;
    return true;
  }

  static std::string path_of(const std::string& name) { return kSegmentDirectory + name; }

  static int create_file(const std::string& path) {
    return open(path.c_str(),
                O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0600);
  }

  // What stands at `path` when it is not this user's regular file ("" when it is, or when
  // nothing does).
  static std::string foreign_file(const std::string& path, uid_t uid) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) {
      return errno == ENOENT ? std::string() : std::string("unreadable: ") + std::strerror(errno);
    }
    if (S_ISLNK(st.st_mode)) return "a symbolic link, not a regular file";
    if (S_ISFIFO(st.st_mode)) return "a FIFO, not a regular file";
    if (S_ISSOCK(st.st_mode)) return "a socket, not a regular file";
    if (S_ISDIR(st.st_mode)) return "a directory, not a regular file";
    if (!S_ISREG(st.st_mode)) return "a device, not a regular file";
    if (st.st_uid != uid) return "owned by uid " + std::to_string(st.st_uid) + ", not by us";
    return std::string();
  }

  // Copies the image into the segment file under the sequence lock: the word odd first, then
  // the whole image (the word still odd in it), then the word even. Readers copy the file with
  // pread and keep a copy only when the word was even and the same before and after it. The file
  // is opened anew each time and must still be the one made (a closed or reused descriptor of
  // the program's can never be written by mistake); a file truncated meanwhile is written whole
  // again; one removed or replaced is made again. False (publishing off, one line) when it
  // cannot be made or written.
  bool store_locked() {
    auto* words = static_cast<std::atomic<std::uint64_t>*>(image_);
    std::atomic<std::uint64_t>& seq = words[segment_sequence_offset() / 8];
    const off_t seq_at = static_cast<off_t>(segment_sequence_offset());
    const std::uint64_t even = seq.load(std::memory_order_relaxed);
    const std::uint64_t odd = even | 1;  // the write in progress; `even` is the one finished
    int fd = open_made();
    if (fd < 0) {
      // Removed (a reader in another pid namespace takes a live process for a dead one) or
      // replaced: made again, as at the start.
      std::string made, why;
      if (!make_file(owner_pid_, geteuid(), bytes_, made, why)) return stop_locked(why, false);
      fd = open_made();
      if (fd < 0) return stop_locked(path_ + ": " + std::strerror(errno), false);
    }
    bool ok = write_at(fd, &odd, 8, seq_at);
    if (ok) {
      seq.store(odd, std::memory_order_relaxed);
      ok = write_at(fd, image_, bytes_, 0);
      seq.store(even, std::memory_order_relaxed);
    }
    ok = ok && write_at(fd, &even, 8, seq_at);
    const int err = errno;
    close(fd);
    if (!ok) return stop_locked("cannot write " + path_ + ": " + std::strerror(err), true);
    return true;
  }

  // The file made, opened for writing; -1 when it is gone or another file stands in its place.
  int open_made() const {
    int fd = open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != device_ ||
        st.st_ino != inode_) {
      close(fd);
      errno = EEXIST;
      return -1;
    }
    return fd;
  }

  static bool write_at(int fd, const void* data, std::size_t bytes, off_t offset) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      ssize_t n = pwrite(fd, p, bytes, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = ENOSPC;
        return false;
      }
      p += n;
      bytes -= static_cast<std::size_t>(n);
      offset += n;
    }
    return true;
  }

  bool stop_locked(const std::string& why, bool ours) {
    fail(why);
    close_segment_locked(/*unlink=*/ours);
    return false;
  }

  bool fail(const std::string& why) {
    failed_ = true;
    std::fprintf(stderr, "modelmem: warning: monitor publishing off: %s\n", why.c_str());
    return false;
  }

  void close_segment_locked(bool unlink_file) noexcept {
    if (image_ == nullptr) return;
    writer_.reset();
    munmap(image_, bytes_);
    // Removed only while it is still the file made: never one someone put in its place.
    struct stat st {};
    if (unlink_file && owner_pid_ == getpid() && lstat(path_.c_str(), &st) == 0 &&
        st.st_dev == device_ && st.st_ino == inode_)
      unlink(path_.c_str());
    image_ = nullptr;
    name_.clear();
    path_.clear();
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
      if (image_ == nullptr) return;
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
      if (writer_ && owner_pid_ == getpid()) {
        writer_->write(pools, now);
        store_locked();
      }
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
    // reachable for the child's lifetime. The segment is the parent's: drop the image without
    // removing the file.
    orphaned_after_fork_ = thread_;
    // The condition variable still counts the parent's thread as a waiter, which no thread
    // here will ever end: a notify would wait for it forever. Nobody waits on it in the child,
    // so a fresh one is built in its place (not destroyed: destruction waits for waiters too).
    new (&cv_) std::condition_variable();
    thread_ = nullptr;
    writer_.reset();
    if (image_ != nullptr) munmap(image_, bytes_);
    image_ = nullptr;
    path_.clear();
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
  void* image_ = nullptr;  ///< the segment's contents, copied into the file by store_locked()
  std::size_t bytes_ = 0;
  std::string name_;  ///< "/modelmem.<user>.<pid>[.r<random>]"
  std::string path_;  ///< the file: kSegmentDirectory + name_
  dev_t device_ = 0;  ///< the file made, by device and inode
  ino_t inode_ = 0;
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

}  // namespace modelmem::monitor
