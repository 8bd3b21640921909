// The preload where the environment is hostile. The trace files of MODELMEM_TRACE / `modelmem
// run --trace`: written as the program runs, so a process killed by a signal leaves its events;
// one file per process, also for a pid used again and an image after an exec; a write failure
// is a non-zero status from `run` and a file that ends at a whole event; symlinks are refused.
// The program keeps its own SIGINT (Python's KeyboardInterrupt) and dies with a `run` that is
// killed. And start-up under an address-space limit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "modelmem/trace/trace.hpp"

namespace {

namespace fs = std::filesystem;
const std::string kBuildDir = MODELMEM_BINARY_DIR;
const std::string kPreloadLib = kBuildDir + "/integrations/preload/libmodelmem_preload.so";
const std::string kPreloadCheck = kBuildDir + "/integrations/preload/preload_check";
const std::string kCli = MODELMEM_CLI;

class TraceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(MODELMEM_PRELOAD_UNAVAILABLE).size() > 0)
      GTEST_SKIP() << MODELMEM_PRELOAD_UNAVAILABLE;
    const char* tmp = std::getenv("TMPDIR");
    dir_ = fs::path(tmp ? tmp : "/tmp") / ("modelmem_tracefile_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

struct Outcome {
  pid_t pid = 0;   // the process started
  int status = 0;  // waitpid's
  std::string out;
  bool hung = false;  // still running `deadline` after the signal: killed with SIGKILL
};

// Runs `argv` with `env` added; when `signal` is non-zero, sends it `delay_us` after the program
// printed "ready" on stdout. stdout and stderr come back together. A program still running
// `deadline` after the signal is killed and reported as hung.
Outcome spawn(const std::vector<std::string>& env, const std::vector<std::string>& argv,
              int signal = 0, int delay_us = 0,
              std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  pid_t child = ::fork();
  if (child == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    // A test run in the background of a shell inherits SIGINT ignored; programs get defaults.
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  Outcome o;
  o.pid = child;
  char buffer[4096];
  bool sent = false;
  auto sent_at = std::chrono::steady_clock::now();
  for (;;) {
    if (sent && std::chrono::steady_clock::now() - sent_at > deadline) {
      o.hung = true;
      ::kill(child, SIGKILL);
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) == 0) continue;
    ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    o.out.append(buffer, static_cast<std::size_t>(n));
    if (signal != 0 && !sent && o.out.find("ready\n") != std::string::npos) {
      if (delay_us > 0) ::usleep(static_cast<useconds_t>(delay_us));
      ::kill(child, signal);
      sent = true;
      sent_at = std::chrono::steady_clock::now();
    }
  }
  ::close(pipe_fds[0]);
  ::waitpid(child, &o.status, 0);
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count(const modelmem::trace::Trace& t, modelmem::alloc::EventKind kind) {
  std::size_t n = 0;
  for (const auto& e : t.events) n += e.kind == kind;
  return n;
}

TEST_F(TraceFile, ATraceSurvivesSigkillSigtermAndSigint) {
  using modelmem::alloc::EventKind;
  for (int sig : {SIGKILL, SIGTERM, SIGINT}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string trace = path("t" + std::to_string(sig) + ".csv");
    Outcome o = spawn({"LD_PRELOAD=" + kPreloadLib, "MODELMEM_ALLOC_CONF=strategy:caching",
                       "MODELMEM_TRACE=" + trace},
                      {kPreloadCheck, "loop"}, sig);
    ASSERT_TRUE(WIFSIGNALED(o.status)) << o.out;
    EXPECT_EQ(WTERMSIG(o.status), sig) << o.out;  // the program ends as it would have
    const std::string text = read_file(trace);
    ASSERT_FALSE(text.empty()) << o.out;
    EXPECT_EQ(text.back(), '\n');
    modelmem::trace::Trace t = modelmem::trace::read_trace(trace);
    // 20000 pairs were made before "ready"; a SIGKILL loses at most one chunk (4096 events).
    const std::size_t lost = sig == SIGKILL ? 4096 / 2 : 0;
    EXPECT_GE(count(t, EventKind::kAlloc), 20000u - lost);
    EXPECT_GE(count(t, EventKind::kFree), 20000u - lost - 1);
  }
}

// SIGINT in the middle of the allocations of four threads, many times, under every strategy,
// through LD_PRELOAD and through `modelmem run --trace` (the program a child, `run` forwarding
// the signal): every run ends by SIGINT within the deadline and leaves a readable trace. The
// handler's flush writes what was recorded before it and no more, so threads that go on
// allocating cannot keep it from returning.
TEST_F(TraceFile, ManySigintsOfAMultiThreadedProgramEndItAndLeaveTheTrace) {
  std::mt19937 random(42);
  int runs = 0;
  for (const char* conf : {"strategy:planned", "strategy:planned,planned_steps:marked",
                           "strategy:caching", "strategy:caching,thread_cache_mb:4",
                           "strategy:static,static_pool_mb:256", "strategy:system"}) {
    for (int via_run = 0; via_run < 2; ++via_run) {
      for (int i = 0; i < 1; ++i, ++runs) {
        SCOPED_TRACE(std::string(conf) + (via_run ? " via run" : " via LD_PRELOAD"));
        const std::string trace = path("int" + std::to_string(runs) + ".csv");
        const int delay = static_cast<int>(random() % 20000);
        Outcome o =
            via_run
                ? spawn({},
                        {kCli, "run", "--conf", conf, "--trace", trace, "--", kPreloadCheck,
                         "loop-threads"},
                        SIGINT, delay, std::chrono::seconds(10))
                : spawn({"LD_PRELOAD=" + kPreloadLib, std::string("MODELMEM_ALLOC_CONF=") + conf,
                         "MODELMEM_TRACE=" + trace},
                        {kPreloadCheck, "loop-threads"}, SIGINT, delay, std::chrono::seconds(10));
        ASSERT_FALSE(o.hung) << o.out;
        if (via_run) {
          ASSERT_TRUE(WIFEXITED(o.status) || WIFSIGNALED(o.status)) << o.out;
          // `run` ends as its program did: by SIGINT.
          EXPECT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGINT) << o.out;
        } else {
          ASSERT_TRUE(WIFSIGNALED(o.status)) << o.out;
          EXPECT_EQ(WTERMSIG(o.status), SIGINT) << o.out;
        }
        if (std::string(conf) == "strategy:system") continue;  // modelmem is off: no trace
        const std::string text = read_file(trace);
        ASSERT_FALSE(text.empty()) << o.out;
        EXPECT_EQ(text.back(), '\n');
        modelmem::trace::Trace t = modelmem::trace::read_trace(trace);
        EXPECT_GE(count(t, modelmem::alloc::EventKind::kAlloc), 20000u) << o.out;
      }
    }
  }
}

// `run --report` says whether a step plan ran past planned_solve_ms (the planning of the
// automatic steps of preload_check runs on a worker thread; here it is quick).
TEST_F(TraceFile, TheReportSaysWhetherAPlanWasDeferred) {
  Outcome o = spawn(
      {}, {kCli, "run", "--report", "--conf", "strategy:planned", "--", kPreloadCheck, "steps"});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  EXPECT_NE(o.out.find("preload_check steps: ok"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("plans deferred    0 (every plan was made within planned_solve_ms)"),
            std::string::npos)
      << o.out;
}

TEST_F(TraceFile, AnUncaughtKeyboardInterruptInPythonKeepsTheTrace) {
  if (::access(MODELMEM_PYTHON, X_OK) != 0) GTEST_SKIP() << "no " MODELMEM_PYTHON;
  const std::string trace = path("py.csv");
  const std::string script =
      "import sys\n"
      "for i in range(3000):\n"
      "    b = bytearray(1 << 20)\n"
      "    del b\n"
      "raise KeyboardInterrupt\n";
  Outcome o = spawn({"LD_PRELOAD=" + kPreloadLib, "MODELMEM_ALLOC_CONF=strategy:caching",
                     "MODELMEM_TRACE=" + trace},
                    {MODELMEM_PYTHON, "-c", script});
  // Python ends itself with SIGINT (default action restored) after the traceback.
  ASSERT_TRUE(WIFSIGNALED(o.status)) << o.out;
  EXPECT_EQ(WTERMSIG(o.status), SIGINT);
  modelmem::trace::Trace t = modelmem::trace::read_trace(trace);
  EXPECT_GE(count(t, modelmem::alloc::EventKind::kAlloc), 3000u) << o.out;
}

TEST_F(TraceFile, EveryProcessOfARunWritesItsOwnFile) {
  const std::string trace = path("run.csv");
  const std::string script = kPreloadCheck + " steps && " + kPreloadCheck + " steps && true";
  Outcome o = spawn({}, {kCli, "run", "--conf", "strategy:planned", "--trace", trace, "--",
                         "/bin/sh", "-c", script});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  ASSERT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  // The shell's own trace is run.csv; each preload_check wrote run.<pid>.csv in full.
  ASSERT_TRUE(fs::exists(trace)) << o.out;
  std::vector<std::string> children;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name != "run.csv" && name.rfind("run.", 0) == 0) children.push_back(entry.path().string());
  }
  ASSERT_EQ(children.size(), 2u) << o.out;
  for (const std::string& child : children) {
    modelmem::trace::Trace t = modelmem::trace::read_trace(child);
    EXPECT_EQ(count(t, modelmem::alloc::EventKind::kAlloc), 2400u) << child;
    EXPECT_EQ(count(t, modelmem::alloc::EventKind::kFree), 2400u) << child;
  }
  // And `analyze` reads them as one set.
  Outcome a = spawn({}, {kCli, "analyze", trace, children[0], children[1]});
  ASSERT_TRUE(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0) << a.out;
  EXPECT_NE(a.out.find("3 files"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("alloc 4800"), std::string::npos) << a.out;
}

TEST_F(TraceFile, AWriteFailureIsANonZeroStatusAndAWholeLastEvent) {
  // A file size limit stands for a full disk; SIGXFSZ ignored, as a write then fails instead.
  const std::string trace = path("full.csv");
  const std::string line = "trap '' XFSZ; ulimit -f 200; exec " + kCli + " run --trace " + trace +
                           " --conf strategy:planned -- " + kPreloadCheck + " steps";
  Outcome o = spawn({}, {"/bin/sh", "-c", line});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 1) << o.out;
  EXPECT_NE(o.out.find("preload_check steps: ok"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("write failed, the file ends at the last whole event"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("modelmem run: 1 trace file(s) not written whole"), std::string::npos)
      << o.out;
  const std::string text = read_file(trace);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_LE(text.size(), 200u * 512u);
  EXPECT_NO_THROW(modelmem::trace::read_trace(trace));
}

TEST_F(TraceFile, ASymlinkAtTheTracePathIsRefused) {
  const std::string target = path("precious");
  const std::string link = path("link.csv");
  { std::ofstream(target) << "precious\n"; }
  fs::create_symlink(target, link);
  // `run` says so before the program starts.
  Outcome o = spawn({}, {kCli, "run", "--trace", link, "--", "/bin/true"});
  ASSERT_TRUE(WIFEXITED(o.status));
  EXPECT_EQ(WEXITSTATUS(o.status), 2) << o.out;
  EXPECT_NE(o.out.find("symbolic link"), std::string::npos) << o.out;
  // The library refuses it too (a link planted after the check, or MODELMEM_TRACE by hand).
  o = spawn({"LD_PRELOAD=" + kPreloadLib, "MODELMEM_TRACE=" + link}, {kPreloadCheck, "steps"});
  ASSERT_TRUE(WIFEXITED(o.status));
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  EXPECT_NE(o.out.find("it is a symbolic link (not followed)"), std::string::npos) << o.out;
  EXPECT_EQ(read_file(target), "precious\n");
  // A dangling link creates nothing where it points.
  fs::remove(target);
  o = spawn({"LD_PRELOAD=" + kPreloadLib, "MODELMEM_TRACE=" + link}, {kPreloadCheck, "steps"});
  EXPECT_FALSE(fs::exists(target));
  // A new trace file is the user's alone.
  const std::string plain = path("plain.csv");
  o = spawn({"LD_PRELOAD=" + kPreloadLib, "MODELMEM_TRACE=" + plain}, {kPreloadCheck, "steps"});
  EXPECT_EQ(fs::status(plain).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

// Events of `kind` in `t` whose size is `size`.
std::size_t count_sized(const modelmem::trace::Trace& t, std::size_t size) {
  std::size_t n = 0;
  for (const auto& e : t.events)
    n += e.kind == modelmem::alloc::EventKind::kAlloc && e.size == size;
  return n;
}

// The status folders of `run` pid `pid` (modelmem-run.<pid>.XXXXXX) in /dev/shm and /tmp.
std::vector<std::string> status_folders_of(pid_t pid) {
  std::vector<std::string> found;
  const std::string prefix = "modelmem-run." + std::to_string(pid) + ".";
  for (const char* base : {"/dev/shm", "/tmp"})
    for (const auto& entry : fs::directory_iterator(base))
      if (entry.path().filename().string().rfind(prefix, 0) == 0)
        found.push_back(entry.path().string());
  return found;
}

TEST_F(TraceFile, UnderRunTracePythonStillRaisesKeyboardInterrupt) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string trace = path("kbd.csv");
  // The library stands in for SIGINT's default to flush the trace; Python installs its own
  // handler only over the default, and must still see it.
  const std::string script =
      "import signal, sys, time\n"
      "print('handler', signal.getsignal(signal.SIGINT).__name__, flush=True)\n"
      "kept = [bytearray((1 << 20) + 11) for i in range(300)]\n"
      "try:\n"
      "    print('ready', flush=True)\n"
      "    time.sleep(20)\n"
      "except KeyboardInterrupt:\n"
      "    print('caught', flush=True)\n"
      "    sys.exit(3)\n";
  Outcome o = spawn({},
                    {kCli, "run", "--conf", "strategy:caching", "--trace", trace, "--",
                     "/usr/bin/python3", "-c", script},
                    SIGINT, 0, std::chrono::seconds(10));
  ASSERT_FALSE(o.hung) << o.out;
  ASSERT_TRUE(WIFEXITED(o.status)) << "ended by signal " << WTERMSIG(o.status) << ": " << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 3) << o.out;
  EXPECT_NE(o.out.find("handler default_int_handler"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("caught"), std::string::npos) << o.out;
  // Flushed at exit: every block made before the interrupt is in the file.
  modelmem::trace::Trace t = modelmem::trace::read_trace(trace);
  EXPECT_GE(count_sized(t, (1u << 20) + 12), 300u) << o.out;
}

TEST_F(TraceFile, ARunKilledTakesItsProgramWithItAndItsFolderGoes) {
  const std::string trace = path("killed.csv");
  // The program holds the output pipe: spawn() sees its end only when the program is gone.
  Outcome o =
      spawn({}, {kCli, "run", "--trace", trace, "--", "/bin/sh", "-c", "echo ready; exec sleep 30"},
            SIGKILL, 0, std::chrono::seconds(10));
  ASSERT_FALSE(o.hung) << "the program outlived `run`: " << o.out;
  ASSERT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL) << o.out;
  // `run` could not remove its status folder; the next `run --trace` removes it.
  Outcome next = spawn({}, {kCli, "run", "--trace", path("next.csv"), "--", "/bin/true"});
  ASSERT_TRUE(WIFEXITED(next.status) && WEXITSTATUS(next.status) == 0) << next.out;
  EXPECT_TRUE(status_folders_of(o.pid).empty());
  EXPECT_TRUE(status_folders_of(next.pid).empty());
  // Signals that end `run` by default reach the program instead, and `run` ends as it did.
  for (int sig : {SIGUSR1, SIGALRM, SIGPIPE}) {
    SCOPED_TRACE(strsignal(sig));
    o = spawn({},
              {kCli, "run", "--trace", trace, "--", "/bin/sh", "-c", "echo ready; exec sleep 30"},
              sig, 0, std::chrono::seconds(10));
    ASSERT_FALSE(o.hung) << o.out;
    EXPECT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == sig) << o.out;
    EXPECT_TRUE(status_folders_of(o.pid).empty());
  }
}

TEST_F(TraceFile, AnExecKeepsTheTraceOfTheImageBeforeIt) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string trace = path("exec.csv");
  const std::string script =
      "import os\n"
      "kept = [bytearray(3 << 20) for i in range(5)]\n"
      "os.execv('/usr/bin/python3', ['python3', '-c', 'k = [bytearray(5 << 20) for i in "
      "range(7)]'])\n";
  Outcome o = spawn({}, {kCli, "run", "--conf", "strategy:caching", "--trace", trace, "--",
                         "/usr/bin/python3", "-c", script});
  ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.out;
  // The first image's events (flushed before the exec) stay in exec.csv; the new image, the
  // same pid, writes exec.<pid>.csv.
  modelmem::trace::Trace first = modelmem::trace::read_trace(trace);
  EXPECT_EQ(count_sized(first, (3u << 20) + 1), 5u);
  EXPECT_EQ(count_sized(first, (5u << 20) + 1), 0u);
  std::vector<std::string> others;
  for (const auto& entry : fs::directory_iterator(dir_))
    if (entry.path().filename() != "exec.csv") others.push_back(entry.path().string());
  ASSERT_EQ(others.size(), 1u) << o.out;
  EXPECT_EQ(fs::path(others[0]).filename().string().rfind("exec.", 0), 0u) << others[0];
  modelmem::trace::Trace second = modelmem::trace::read_trace(others[0]);
  EXPECT_EQ(count_sized(second, (5u << 20) + 1), 7u);
  EXPECT_EQ(count_sized(second, (3u << 20) + 1), 0u);
}

TEST_F(TraceFile, APidUsedAgainDoesNotOverwriteAnEarlierChildsFile) {
  // In a pid namespace of its own, the next pid is set back (ns_last_pid): the second
  // preload_check gets the first one's pid.
  const std::string trace = path("reuse.csv");
  const std::string script = kPreloadCheck + " steps && echo 1 > /proc/sys/kernel/ns_last_pid && " +
                             kPreloadCheck + " steps && echo pids-reused";
  Outcome o = spawn({}, {kCli, "run", "--conf", "strategy:planned", "--trace", trace, "--",
                         "unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script});
  if (o.out.find("pids-reused") == std::string::npos)
    GTEST_SKIP() << "no pid namespace with a settable next pid here: " << o.out;
  ASSERT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) << o.out;
  std::vector<std::string> full;  // files with preload_check's 2400 allocations
  for (const auto& entry : fs::directory_iterator(dir_)) {
    modelmem::trace::Trace t = modelmem::trace::read_trace(entry.path().string());
    if (count(t, modelmem::alloc::EventKind::kAlloc) == 2400u)
      full.push_back(entry.path().filename().string());
  }
  std::sort(full.begin(), full.end());
  // reuse.<pid>.2.csv sorts before reuse.<pid>.csv.
  ASSERT_EQ(full.size(), 2u) << o.out;
  const std::string first = full[1];
  ASSERT_EQ(first.rfind(".csv"), first.size() - 4) << first;
  EXPECT_EQ(full[0], first.substr(0, first.size() - 4) + ".2.csv") << o.out;
}

TEST_F(TraceFile, RunStartsUnderAnAddressSpaceLimit) {
  // 16 GiB (ulimit -v counts KiB), far below the 256 GiB reservation asked by default.
  const std::string line = "ulimit -v 16777216; " + kCli + " run --conf strategy:caching -- " +
                           kPreloadCheck + " threads && " + kCli +
                           " run --conf strategy:planned -- /bin/sh -c '" + kPreloadCheck +
                           " steps; " + kPreloadCheck + " steps'";
  Outcome o = spawn({}, {"/bin/sh", "-c", line});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  EXPECT_NE(o.out.find("preload_check threads: ok"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("preload_check steps: ok"), std::string::npos) << o.out;
  // Said once per run (the second run's children stay quiet), naming the limit and the key.
  std::size_t notes = 0;
  for (std::size_t at = 0;
       (at = o.out.find("of address space for large requests", at)) != std::string::npos; ++at)
    ++notes;
  EXPECT_EQ(notes, 2u) << o.out;
  EXPECT_NE(o.out.find("RLIMIT_AS (ulimit -v) is 16.00 GiB"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("preload_reserve_gb"), std::string::npos) << o.out;
  // What the program could allocate alone it allocates under `run`: a 2 GiB block under 4 GiB
  // (the reservation, half of what the limit leaves, is given back when the C library needs it).
  o = spawn({}, {"/bin/sh", "-c",
                 "ulimit -v 4194304; " + kCli + " run -- " + kPreloadCheck + " two-gib"});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  EXPECT_NE(o.out.find("preload_check two-gib: ok"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("unused, was given back to it"), std::string::npos) << o.out;
  // Under 1.43 GiB, where less than 1 GiB fits, the program runs too (it was refused, even
  // with preload_reserve_gb:1, the smallest setting).
  o = spawn(
      {}, {"/bin/sh", "-c",
           "ulimit -v 1500000; " + kCli + " run --conf strategy:planned,preload_reserve_gb:1 -- " +
               kPreloadCheck + " threads"});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
  EXPECT_NE(o.out.find("preload_check threads: ok"), std::string::npos) << o.out;
  // Where not even 64 MiB fits, `run` says which limit and what setting works, before the
  // program starts.
  o = spawn({}, {"/bin/sh", "-c", "ulimit -v 100000; " + kCli + " run -- /bin/true"});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 2) << o.out;
  EXPECT_NE(o.out.find("RLIMIT_AS (ulimit -v) is 97.66 MiB"), std::string::npos) << o.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      o.out, m, std::regex(R"(raise the limit to at least .* \(ulimit -v (\d+)\))")))
      << o.out;
  // The limit it names works.
  o = spawn({}, {"/bin/sh", "-c", "ulimit -v " + m[1].str() + "; " + kCli + " run -- /bin/true"});
  ASSERT_TRUE(WIFEXITED(o.status)) << o.out;
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << o.out;
}

}  // namespace
