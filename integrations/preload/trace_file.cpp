// The trace file of each process (trace_file.hpp). Runs in fork children and signal handlers:
// fixed buffers, write(2) and other async-signal-safe calls only, no heap.
#include "trace_file.hpp"

#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include "modelmem/core/files.hpp"
#include "modelmem/trace/recorder.hpp"
#include "state.hpp"

extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);  // glibc's own
extern char** environ;

namespace modelmem::preload {
namespace {

constexpr std::size_t kPathMax = 4096;
char g_stem[kPathMax];       // T (of T.csv): the name before its extension
char g_extension[kPathMax];  // .csv, or "" when the name has none
char g_status[kPathMax];     // MODELMEM_TRACE_STATUS: `modelmem run`'s folder for failures
char g_path[kPathMax];       // this process's file
int g_fd = -1;
pid_t g_fd_owner = 0;  // the process g_fd was opened by (a vfork child shares it, and must not)
bool g_reported = false;
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
// Signals whose default action the library took over to flush the trace (`managed`) and, of
// those, the ones where the program has not set a handler of its own since (`standing_in`): the
// program is shown SIG_DFL there (sigaction below), so that a runtime that installs its own
// handler only over the default (Python's SIGINT, for KeyboardInterrupt) still does.
std::atomic<bool> g_managed[NSIG];
std::atomic<bool> g_standing_in[NSIG];

using ExecvpeFn = int (*)(const char*, char* const[], char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);
using SignalFn = sighandler_t (*)(int, sighandler_t);
ExecvpeFn g_execvpe = nullptr;
FexecveFn g_fexecve = nullptr;
SignalFn g_signal = nullptr;  // the C library's, for signals the library leaves alone

int real_sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  return ::__sigaction(sig, act, old);
}

// Appends to a fixed buffer, cutting what does not fit.
struct Text {
  char* out;
  std::size_t capacity;
  std::size_t length = 0;
  Text& operator<<(const char* s) {
    while (*s != '\0' && length + 1 < capacity) out[length++] = *s++;
    out[length] = '\0';
    return *this;
  }
  Text& operator<<(unsigned long v) {
    char digits[24];
    int n = 0;
    do digits[n++] = static_cast<char>('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0 && length + 1 < capacity) out[length++] = digits[--n];
    out[length] = '\0';
    return *this;
  }
};

void say(const char* text) noexcept {
  std::size_t n = std::strlen(text);
  while (n > 0) {
    ssize_t w = ::write(2, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

// One line on stderr, and a file named after the pid in `run`'s status folder.
void report_failure(const char* what, const char* why) noexcept {
  if (g_reported) return;
  g_reported = true;
  char line[kPathMax + 256];
  Text t{line, sizeof line};
  t << "modelmem preload: trace " << g_path << ": " << what << ": " << why << "\n";
  say(line);
  if (g_status[0] == '\0') return;
  char name[kPathMax + 32];
  Text n{name, sizeof name};
  n << g_status << "/" << static_cast<unsigned long>(::getpid());
  int fd = ::open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, line, t.length);
    (void)ignored;
    ::close(fd);
  }
}

// strerror may translate (locale, locks): signal handlers get the untranslated text.
const char* error_text(int error) noexcept {
  const char* text = ::strerrordesc_np(error);
  return text != nullptr ? text : "unknown error";
}

// Writes what is pending; reports a failed stream once.
void flush_trace() noexcept {
  if (g_recorder == nullptr || g_fd < 0) return;
  if (!g_recorder->flush() && g_recorder->stream_error() != 0)
    report_failure("write failed, the file ends at the last whole event written",
                   error_text(g_recorder->stream_error()));
}

// Whether `path` is this user's trace file that holds the CSV header and nothing else: what an
// image that wrote no event leaves (a fork child that went straight to exec), free to take over.
bool header_only(const char* path) noexcept {
  const std::size_t bytes = trace::kCsvHeader.size() + 1;
  int fd = ::open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  char text[1024];
  bool same = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
              st.st_nlink == 1 && static_cast<std::size_t>(st.st_size) == bytes &&
              bytes <= sizeof text && ::pread(fd, text, bytes, 0) == static_cast<ssize_t>(bytes) &&
              std::memcmp(text, trace::kCsvHeader.data(), bytes - 1) == 0 &&
              text[bytes - 1] == '\n';
  ::close(fd);
  return same;
}

// The file of a process that is not the run's first: T.<pid>.csv, or T.<pid>.<n>.csv (n = 2, 3,
// ...) when that one holds events of an earlier process with the same pid (a pid used again, or
// this very process before an exec). Never another process's events overwritten: a name is
// created exclusively, or taken over only when it holds the header alone. `exec_of_first`: the
// run's first process after an exec, which takes over T.csv when that holds nothing yet (a
// wrapper script that execs the program).
int open_own_file(bool exec_of_first, const char** why) noexcept {
  if (exec_of_first) {
    Text p{g_path, sizeof g_path};
    p << g_stem << g_extension;
    if (header_only(g_path)) return core::open_output_file(g_path, 0600, why);
  }
  for (unsigned long n = 1; n <= 10000; ++n) {
    Text p{g_path, sizeof g_path};
    p << g_stem << "." << static_cast<unsigned long>(::getpid());
    if (n > 1) p << "." << n;
    p << g_extension;
    int fd =
        ::open(g_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd >= 0) {
      if (::fchmod(fd, 0600) == 0) return fd;  // the umask may have removed bits
      *why = error_text(errno);
      ::close(fd);
      return -1;
    }
    if (errno != EEXIST) {
      *why = errno == ELOOP ? "it is a symbolic link (not followed)" : error_text(errno);
      return -1;
    }
    if (header_only(g_path)) return core::open_output_file(g_path, 0600, why);
  }
  *why = "10000 files of this pid exist already";
  return -1;
}

// `first`: the run's first process (T.csv); `exec_of_first`: that process after an exec.
void open_for_this_process(bool first, bool exec_of_first) noexcept {
  const char* why = nullptr;
  if (first) {
    Text{g_path, sizeof g_path} << g_stem << g_extension;
    g_fd = core::open_output_file(g_path, 0600, &why);
  } else {
    g_fd = open_own_file(exec_of_first, &why);
  }
  if (g_fd < 0) {
    report_failure("refused, no trace written", why);
    return;
  }
  g_fd_owner = ::getpid();
  if (!g_recorder->stream_to(g_fd, kTraceChunk))
    report_failure("write failed", error_text(g_recorder->stream_error()));
}

void at_exit() noexcept {
  Inside inside;
  flush_trace();
}

// SIGTERM, SIGINT, SIGHUP left at their default action (terminate): the trace is flushed, then
// the signal is raised again with its default action, so the program ends as it would have.
void on_signal(int sig) noexcept {
  const int saved = errno;
  ++t_depth;  // whatever allocates from here on is not modelmem's business
  flush_trace();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  g_standing_in[sig].store(false, std::memory_order_relaxed);
  real_sigaction(sig, &dfl, nullptr);
  --t_depth;
  errno = saved;
  ::raise(sig);  // delivered when the handler returns (the signal is blocked until then)
}

bool terminating(int sig) noexcept {
  for (int s : kSignals)
    if (s == sig) return true;
  return sig == SIGQUIT || sig == SIGABRT || sig == SIGKILL || sig == SIGUSR1 || sig == SIGUSR2 ||
         sig == SIGALRM;
}

// Whether `sig` sent to this process now would end it without running exit handlers.
bool would_end(int sig) noexcept {
  if (!terminating(sig)) return false;
  if (sig == SIGKILL) return true;
  struct sigaction now {};
  return real_sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_DFL &&
         !(now.sa_flags & SA_SIGINFO);
}

// Installs the flushing handler where the program's action is the default.
void stand_in(int sig) noexcept {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  g_standing_in[sig].store(true, std::memory_order_relaxed);
  if (real_sigaction(sig, &sa, nullptr) != 0) g_standing_in[sig].store(false);
}

// What the program is shown of an action while the library stands in for the default.
void show_default(struct sigaction* old) noexcept {
  if (old == nullptr) return;
  std::memset(old, 0, sizeof *old);
  old->sa_handler = SIG_DFL;
  sigemptyset(&old->sa_mask);
}

// Flushes the trace before the process image is replaced: the new image writes a file of its
// own (open_own_file), and what this one recorded is in its file.
void before_exec() noexcept {
  if (g_recorder == nullptr || g_fd < 0 || g_fd_owner != ::getpid()) return;
  Inside inside;
  flush_trace();
}

ExecvpeFn real_execvpe() noexcept {
  if (g_execvpe == nullptr) g_execvpe = reinterpret_cast<ExecvpeFn>(::dlsym(RTLD_NEXT, "execvpe"));
  return g_execvpe;
}
FexecveFn real_fexecve() noexcept {
  if (g_fexecve == nullptr) g_fexecve = reinterpret_cast<FexecveFn>(::dlsym(RTLD_NEXT, "fexecve"));
  return g_fexecve;
}

// The arguments of execl / execlp / execle after the first, `count` of them counted with the
// first (count_args), into `argv`; the pointer after the null that ends them (execle's envp) is
// returned.
char* const* collect_args(char** argv, const char* first, va_list args, std::size_t count,
                          bool with_env) noexcept {
  if (count > 0) argv[0] = const_cast<char*>(first);
  for (std::size_t i = 1; i < count; ++i) argv[i] = va_arg(args, char*);
  if (count > 0) (void)va_arg(args, char*);  // the null pointer that ends them
  return with_env ? va_arg(args, char* const*) : nullptr;
}

std::size_t count_args(const char* first, va_list args) noexcept {
  std::size_t n = 0;
  if (first == nullptr) return 0;
  while (va_arg(args, char*) != nullptr) ++n;
  return n + 1;  // the first, and those after it before the null pointer
}

}  // namespace

void start_trace(const char* path) noexcept {
  const char* slash = std::strrchr(path, '/');
  const char* dot = std::strrchr(slash != nullptr ? slash + 1 : path, '.');
  const std::size_t stem = dot != nullptr && dot != (slash ? slash + 1 : path)
                               ? static_cast<std::size_t>(dot - path)
                               : std::strlen(path);
  if (stem >= kPathMax - 32) {
    say("modelmem preload: trace path too long; no trace written\n");
    return;
  }
  std::memcpy(g_stem, path, stem);
  g_stem[stem] = '\0';
  Text{g_extension, sizeof g_extension} << path + stem;
  if (const char* status = std::getenv("MODELMEM_TRACE_STATUS"))
    Text{g_status, sizeof g_status} << status;
  // The first process of a run names itself in the environment its children inherit.
  const char* root = std::getenv("MODELMEM_TRACE_PID");
  char self[24];
  Text{self, sizeof self} << static_cast<unsigned long>(::getpid());
  const bool first = root == nullptr || *root == '\0';
  // The first process names itself; the same pid here again is that process after an exec.
  const bool exec_of_first = !first && std::strcmp(root, self) == 0;
  if (first) ::setenv("MODELMEM_TRACE_PID", self, 1);
  open_for_this_process(first, exec_of_first);
  std::atexit(at_exit);
  for (int sig : kSignals) {
    struct sigaction old {};
    if (real_sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      continue;  // the program's own handler (or an ignored signal) stays
    g_managed[sig].store(true, std::memory_order_relaxed);
    stand_in(sig);
  }
}

void resolve_exec() noexcept {
  real_execvpe();
  real_fexecve();
  g_signal = reinterpret_cast<SignalFn>(::dlsym(RTLD_NEXT, "signal"));
}

void trace_fork_child() noexcept {
  if (g_recorder == nullptr) return;
  g_recorder->forget_after_fork();
  if (g_fd >= 0) ::close(g_fd);
  g_fd = -1;
  g_reported = false;
  open_for_this_process(false, false);
}

}  // namespace modelmem::preload

// A program that ends itself with a signal (Python re-raises SIGINT after an uncaught
// KeyboardInterrupt, with the default action restored) skips exit handlers: the trace is
// flushed first.
extern "C" __attribute__((visibility("default"))) int kill(pid_t pid, int sig) noexcept {
  using namespace modelmem::preload;
  if ((pid == ::getpid() || pid == 0 || pid == -::getpgrp()) && would_end(sig)) {
    Inside inside;
    flush_trace();
  }
  return static_cast<int>(::syscall(SYS_kill, pid, sig));
}

extern "C" __attribute__((visibility("default"))) int raise(int sig) noexcept {
  using namespace modelmem::preload;
  if (would_end(sig)) {
    Inside inside;
    flush_trace();
  }
  return static_cast<int>(::syscall(SYS_tgkill, ::getpid(), ::syscall(SYS_gettid), sig));
}

// While the library stands in for a signal's default action, the program is shown SIG_DFL; a
// handler it sets (or SIG_IGN) replaces the library's, and SIG_DFL set again brings the
// library's back (the program then ends by that signal as before, the trace flushed).
extern "C" __attribute__((visibility("default"))) int sigaction(int sig,
                                                                const struct sigaction* act,
                                                                struct sigaction* old) noexcept {
  using namespace modelmem::preload;
  if (sig <= 0 || sig >= NSIG || !g_managed[sig].load(std::memory_order_relaxed))
    return real_sigaction(sig, act, old);
  const bool dfl = act != nullptr && act->sa_handler == SIG_DFL && !(act->sa_flags & SA_SIGINFO);
  if (g_standing_in[sig].load(std::memory_order_relaxed)) {
    struct sigaction now {};
    if (real_sigaction(sig, nullptr, &now) == 0 && now.sa_handler == on_signal &&
        !(now.sa_flags & SA_SIGINFO)) {
      if (act == nullptr || dfl) {
        show_default(old);
        return 0;
      }
      g_standing_in[sig].store(false, std::memory_order_relaxed);
      const int r = real_sigaction(sig, act, nullptr);
      if (r != 0) {
        g_standing_in[sig].store(true, std::memory_order_relaxed);
        return r;
      }
      show_default(old);
      return 0;
    }
    // Replaced behind the library's back (a raw system call): the program's action is real.
    g_standing_in[sig].store(false, std::memory_order_relaxed);
  }
  if (!dfl) return real_sigaction(sig, act, old);
  if (old != nullptr && real_sigaction(sig, nullptr, old) != 0) return -1;
  stand_in(sig);
  return 0;
}

// glibc's signal() calls its own sigaction directly; the same view through it.
extern "C" __attribute__((visibility("default"))) sighandler_t signal(
    int sig, sighandler_t handler) noexcept {
  using namespace modelmem::preload;
  // A signal the library leaves alone: exactly the C library's signal() (siginterrupt and all).
  if (g_signal != nullptr && (sig <= 0 || sig >= NSIG || !g_managed[sig].load()))
    return g_signal(sig, handler);
  struct sigaction act {
  }, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (sig > 0 && sig < NSIG) sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

// The exec family: the trace flushed first (exit handlers do not run at an exec).
extern "C" __attribute__((visibility("default"))) int execve(const char* path, char* const argv[],
                                                             char* const envp[]) noexcept {
  modelmem::preload::before_exec();
  return static_cast<int>(::syscall(SYS_execve, path, argv, envp));
}

extern "C" __attribute__((visibility("default"))) int execv(const char* path,
                                                            char* const argv[]) noexcept {
  return execve(path, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[],
                                                              char* const envp[]) noexcept {
  using namespace modelmem::preload;
  before_exec();
  ExecvpeFn next = real_execvpe();
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return next(file, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int execvp(const char* file,
                                                             char* const argv[]) noexcept {
  return execvpe(file, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int fexecve(int fd, char* const argv[],
                                                              char* const envp[]) noexcept {
  using namespace modelmem::preload;
  before_exec();
  FexecveFn next = real_fexecve();
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return next(fd, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int execveat(int dirfd, const char* path,
                                                               char* const argv[],
                                                               char* const envp[],
                                                               int flags) noexcept {
  modelmem::preload::before_exec();
  return static_cast<int>(::syscall(SYS_execveat, dirfd, path, argv, envp, flags));
}

#define MODELMEM_COLLECT(first, with_env)                                                  \
  va_list count_list;                                                                      \
  va_start(count_list, first);                                                             \
  const std::size_t count = modelmem::preload::count_args(first, count_list);              \
  va_end(count_list);                                                                      \
  char** argv = static_cast<char**>(alloca((count + 1) * sizeof(char*)));                  \
  va_list list;                                                                            \
  va_start(list, first);                                                                   \
  char* const* envp = modelmem::preload::collect_args(argv, first, list, count, with_env); \
  va_end(list);                                                                            \
  argv[count] = nullptr;                                                                   \
  (void)envp

extern "C" __attribute__((visibility("default"))) int execl(const char* path, const char* arg,
                                                            ...) noexcept {
  MODELMEM_COLLECT(arg, false);
  return execve(path, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int execlp(const char* file, const char* arg,
                                                             ...) noexcept {
  MODELMEM_COLLECT(arg, false);
  return execvpe(file, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int execle(const char* path, const char* arg,
                                                             ...) noexcept {
  MODELMEM_COLLECT(arg, true);
  return execve(path, argv, envp);
}
#undef MODELMEM_COLLECT
