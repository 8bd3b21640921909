// The trace file of each process (trace_file.hpp). Runs in fork children and signal handlers:
// fixed buffers, write(2) and other async-signal-safe calls only, no heap.
#include "trace_file.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "modelmem/core/files.hpp"
#include "state.hpp"

namespace modelmem::preload {
namespace {

constexpr std::size_t kPathMax = 4096;
char g_stem[kPathMax];       // T (of T.csv): the name before its extension
char g_extension[kPathMax];  // .csv, or "" when the name has none
char g_status[kPathMax];     // MODELMEM_TRACE_STATUS: `modelmem run`'s folder for failures
char g_path[kPathMax];       // this process's file
int g_fd = -1;
bool g_reported = false;
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};

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

void open_for_this_process(bool first) noexcept {
  Text p{g_path, sizeof g_path};
  if (first)
    p << g_stem << g_extension;
  else
    p << g_stem << "." << static_cast<unsigned long>(::getpid()) << g_extension;
  const char* why = nullptr;
  g_fd = core::open_output_file(g_path, 0600, &why);
  if (g_fd < 0) {
    report_failure("refused, no trace written", why);
    return;
  }
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
  ::sigaction(sig, &dfl, nullptr);
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
  return ::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_DFL &&
         !(now.sa_flags & SA_SIGINFO);
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
  const bool first = root == nullptr || *root == '\0' || std::strcmp(root, self) == 0;
  if (root == nullptr || *root == '\0') ::setenv("MODELMEM_TRACE_PID", self, 1);
  open_for_this_process(first);
  std::atexit(at_exit);
  for (int sig : kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      continue;  // the program's own handler (or an ignored signal) stays
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(sig, &sa, nullptr);
  }
}

void trace_fork_child() noexcept {
  if (g_recorder == nullptr) return;
  g_recorder->forget_after_fork();
  if (g_fd >= 0) ::close(g_fd);
  g_fd = -1;
  g_reported = false;
  open_for_this_process(false);
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
