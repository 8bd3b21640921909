// `modelmem run [options] -- PROGRAM [ARGS...]`: runs a program under libmodelmem_preload.so,
// optionally composed with a small-object allocator preloaded after it. Before the program
// starts, the stack the library would build is built here by the library's own code
// (preload::preflight): a configuration `modelmem config` rejects, or one the library would
// refuse (a static pool without a size or larger than memory, fallback:error where the fallback
// is needed, an unwritable --trace path), is an error here (exit 2), not a library that
// disables itself inside the program.
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem_preload/preflight.hpp"

namespace fs = std::filesystem;

namespace modelmem::tools {
namespace {

struct Args {
  std::string conf;
  bool conf_given = false;
  std::string small = "libc";
  std::string preload;
  std::string trace;
  std::string heap_pages = "huge";
  bool report = false;
  bool dry_run = false;
  std::vector<std::string> command;
};

// Debian's names of the small-object allocators, in the C library's directory.
const std::map<std::string, std::pair<std::string, std::string>>& known_allocators() {
  static const std::map<std::string, std::pair<std::string, std::string>> known = {
      {"tcmalloc", {"libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"}},
      {"mimalloc", {"libmimalloc.so.2", "libmimalloc2.0"}},
      {"jemalloc", {"libjemalloc.so.2", "libjemalloc2"}},
  };
  return known;
}

// The directory the C library was loaded from (/lib/x86_64-linux-gnu on Debian amd64).
fs::path libc_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&std::fopen), &info) == 0 || info.dli_fname == nullptr)
    throw Error("run: cannot tell where the C library was loaded from");
  return fs::path(info.dli_fname).parent_path();
}

// `path` made absolute, or InvalidInput "run: WHAT: no such file".
std::string existing_file(const std::string& path, const std::string& what) {
  if (!fs::exists(path)) throw InvalidInput("run: " + what + ": no such file");
  return fs::absolute(path).string();
}

// The small-object allocator to preload after modelmem, or "" for the C library.
std::string small_allocator(const std::string& name) {
  if (name == "libc" || name == "glibc") return "";
  auto it = known_allocators().find(name);
  if (it != known_allocators().end()) {
    fs::path dir = libc_directory();
    for (const fs::path& d : {dir, fs::path("/usr") / dir.relative_path()}) {
      if (fs::exists(d / it->second.first)) return (d / it->second.first).string();
    }
    throw InvalidInput("run: --small " + name + ": " + (dir / it->second.first).string() +
                       " is not installed (Debian package " + it->second.second + ")");
  }
  if (name.find('/') == std::string::npos)
    throw InvalidInput("run: --small " + name +
                       ": expected libc, tcmalloc, mimalloc, jemalloc or the path of a library");
  return existing_file(name, "--small " + name);
}

// libmodelmem_preload.so: --preload, $MODELMEM_PRELOAD, next to this tool in a build tree,
// or in the library folder of an installation (MODELMEM_INSTALL_LIBDIR, e.g. lib or
// lib/x86_64-linux-gnu, beside the bin folder this tool is installed in).
std::string preload_library(const std::string& given) {
  if (!given.empty()) return existing_file(given, "--preload " + given);
  if (const char* env = std::getenv("MODELMEM_PRELOAD"); env != nullptr && *env != '\0')
    return existing_file(env, std::string("MODELMEM_PRELOAD=") + env);
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("run: cannot find this program's own path: " + ec.message());
  const fs::path here = self.parent_path();
  std::vector<fs::path> candidates = {
      here / "integrations/preload/libmodelmem_preload.so",
      here / ".." / MODELMEM_INSTALL_LIBDIR / "libmodelmem_preload.so"};
  for (const auto& c : candidates)
    if (fs::exists(c)) return fs::weakly_canonical(c).string();
  throw InvalidInput("run: libmodelmem_preload.so not found (looked in " + candidates[0].string() +
                     " and " + candidates[1].string() +
                     "); give --preload PATH or set MODELMEM_PRELOAD");
}

// A word for a shell line, quoted where needed.
std::string shell_word(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// GLIBC_TUNABLES for the program: with the small requests left to glibc, its heap is put in
// transparent huge pages (glibc.malloc.hugetlb=1, glibc 2.35 and later: glibc then asks for them
// on every piece of heap it takes). A framework's small objects are spread over that heap, and
// touched on every operator; measured faster on every model (docs/benchmarks.md).
// "" when nothing is to be set: another small-object allocator, --heap-pages default, or a
// hugetlb setting of the user's own.
std::string heap_tunables(const Args& args) {
  if (args.heap_pages != "huge" && args.heap_pages != "default")
    throw InvalidInput("run: --heap-pages " + args.heap_pages + ": expected huge or default");
  if (args.heap_pages == "default" || args.small != "libc") return "";
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::string tunables = old != nullptr ? old : "";
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos) return "";
  return tunables.empty() ? "glibc.malloc.hugetlb=1" : tunables + ":glibc.malloc.hugetlb=1";
}

// MKL_DISABLE_FAST_MM for the program: Intel MKL (linked into PyPI's PyTorch for x86) keeps
// every packing buffer its GEMMs allocate in a cache of its own and never frees one: on PyTorch
// 2.13 a Swin-T holds 31 MiB of them after its first inference, outside anything a plan of the
// model can see, and its quota printed by `plan --fit` was refused (docs/benchmarks.md,
// need-order-2x). Disabled, each buffer is a request of one GEMM that goes back to the pool when
// the GEMM ends. A setting of the user's own (any value) is left alone; "" when nothing is set.
std::string mkl_fast_mm(const config::Config& conf) {
  if (conf.get("strategy") == "system" || std::getenv("MKL_DISABLE_FAST_MM") != nullptr) return "";
  return "1";
}

// With --trace, the program runs as a child and `run` waits for it: a trace that could not be
// written whole (a full disk, a refused path; in any process of the program) is reported by
// the library in a status folder, and `run` exits 1 where the program itself exited 0.
// The signals that would end `run` (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM,
// SIGPIPE), sent by another process, reach the program instead; the terminal's (Ctrl-C) reach
// it already, being sent to the whole process group. A `run` that dies anyway (SIGKILL) takes
// the program with it (PR_SET_PDEATHSIG), and its status folder is removed by the next `run`.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE};
constexpr const char* kStatusPrefix = "modelmem-run.";
volatile sig_atomic_t g_child = 0;

void forward_signal(int sig, siginfo_t* info, void*) {
  const pid_t child = g_child;
  if (child > 0 && info != nullptr && info->si_code <= 0) ::kill(child, sig);  // SI_USER etc.
}

// Files of the status folder: each a line the library printed already. Removes the folder.
std::vector<std::string> collect_failures(const std::string& dir) {
  std::vector<std::string> failures;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      if (entry->d_name[0] == '.') continue;
      const std::string path = dir + "/" + entry->d_name;
      std::string text;
      if (std::FILE* f = std::fopen(path.c_str(), "r")) {
        char buffer[512];
        std::size_t n = std::fread(buffer, 1, sizeof buffer, f);
        text.assign(buffer, n);
        std::fclose(f);
      }
      while (!text.empty() && text.back() == '\n') text.pop_back();
      failures.push_back(text.empty() ? std::string("pid ") + entry->d_name : text);
      ::unlink(path.c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
  return failures;
}

// Removes the status folders (modelmem-run.<pid>.XXXXXX) of this user's runs that are gone:
// a `run` killed by SIGKILL could not remove its own.
void remove_folders_of_dead_runs(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind(kStatusPrefix, 0) != 0) continue;
    const std::string rest = name.substr(std::strlen(kStatusPrefix));
    const std::size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || rest.find_first_not_of("0123456789") != dot)
      continue;  // not a name this version makes
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    const std::string dir = base + "/" + name;
    struct stat st {};
    if (pid <= 0 || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    collect_failures(dir);  // empties and removes it
  }
  ::closedir(d);
}

std::string make_status_folder() {
  for (const char* base : {"/dev/shm", "/tmp"}) remove_folders_of_dead_runs(base);
  for (const char* base : {"/dev/shm", "/tmp"}) {
    std::string dir =
        std::string(base) + "/" + kStatusPrefix + std::to_string(::getpid()) + ".XXXXXX";
    if (::mkdtemp(dir.data()) != nullptr) return dir;
  }
  throw Error(std::string("run: cannot make a status folder in /dev/shm or /tmp: ") +
              std::strerror(errno));
}

int run_and_wait(const std::vector<char*>& argv, const std::string& status) {
  std::fflush(nullptr);
  // The forwarded signals are blocked from before the fork until the handler that forwards
  // them is in place: one that came in between would end `run` and leave the program running.
  sigset_t forwarded, before;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_BLOCK, &forwarded, &before);
  const pid_t parent = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    throw Error(std::string("run: fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    // Stopped when `run` dies: a `run` killed by SIGKILL left the program running, tracing
    // without a bound. (Checked after: `run` may have died before the request.)
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(128 + SIGKILL);
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "modelmem run: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(errno == ENOENT ? 127 : 126);
  }
  g_child = child;
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  int wstatus = 0;
  while (::waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;  // reaped: its pid may name another process from now on
  const std::vector<std::string> failures = collect_failures(status);
  if (WIFSIGNALED(wstatus)) {
    // End as the program ended: the same signal, default action, no core file of ours.
    const int sig = WTERMSIG(wstatus);
    if (!failures.empty())
      std::fprintf(stderr, "modelmem run: %zu trace file(s) not written whole (above)\n",
                   failures.size());
    struct rlimit no_core {
      0, 0
    };
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
    return 128 + sig;
  }
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
  if (!failures.empty()) {
    std::fprintf(stderr,
                 "modelmem run: %zu trace file(s) not written whole (above); exit status %d\n",
                 failures.size(), code == 0 ? 1 : code);
    return code == 0 ? 1 : code;
  }
  return code;
}

int run(const Args& args) {
  if (args.command.empty())
    throw InvalidInput("run: no program given (modelmem run [options] -- PROGRAM [ARGS...])");
  std::string conf = args.conf;
  if (!args.conf_given) {
    const char* env = std::getenv("MODELMEM_ALLOC_CONF");
    conf = env != nullptr && *env != '\0' ? env : preload::kDefaultConf;
  }
  // Parses (naming a bad key) and builds what the library would build.
  if (std::string why = preload::preflight(conf, args.trace); !why.empty())
    throw InvalidInput("run: " + why + " (the program was not started)");
  config::Config parsed = config::parse_config(conf);
  if (parsed.get("strategy") == "system")
    std::fprintf(stderr,
                 "modelmem run: strategy:system leaves every request to the next allocator\n");

  std::vector<std::string> preloads = {preload_library(args.preload)};
  if (std::string small = small_allocator(args.small); !small.empty()) preloads.push_back(small);
  std::string ld_preload;
  for (const auto& p : preloads) ld_preload += (ld_preload.empty() ? "" : " ") + p;
  // What was preloaded already comes after: modelmem must come first to see every request.
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
    ld_preload += std::string(" ") + old;

  std::vector<std::pair<std::string, std::string>> env = {{"LD_PRELOAD", ld_preload},
                                                          {"MODELMEM_ALLOC_CONF", conf}};
  if (args.report) env.emplace_back("MODELMEM_REPORT", "1");
  if (!args.trace.empty()) env.emplace_back("MODELMEM_TRACE", args.trace);
  if (std::string tunables = heap_tunables(args); !tunables.empty())
    env.emplace_back("GLIBC_TUNABLES", tunables);
  if (std::string mkl = mkl_fast_mm(parsed); !mkl.empty())
    env.emplace_back("MKL_DISABLE_FAST_MM", mkl);

  if (args.dry_run) {
    std::string line;
    for (const auto& [k, v] : env) line += k + "=" + shell_word(v) + " ";
    for (std::size_t i = 0; i < args.command.size(); ++i)
      line += (i ? " " : "") + shell_word(args.command[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  }
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : args.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (!args.trace.empty()) {
    ::unsetenv("MODELMEM_TRACE_PID");  // an outer run's: the program is the first process here
    const std::string status = make_status_folder();
    ::setenv("MODELMEM_TRACE_STATUS", status.c_str(), 1);
    return run_and_wait(argv, status);
  }
  std::fflush(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "modelmem run: cannot run %s: %s\n", argv[0], std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

void setup_run(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a program under libmodelmem_preload.so (large requests to modelmem, small ones to "
      "glibc or to --small), the configuration checked first");
  cmd->add_option("--conf", args->conf,
                  "Configuration string (default: $MODELMEM_ALLOC_CONF, else strategy:planned)");
  cmd->add_option("--small", args->small,
                  "Allocator of requests below the threshold: libc (through modelmem's "
                  "per-thread cache of freed blocks, preload_cache_kb), tcmalloc, mimalloc, "
                  "jemalloc or a library path (preloaded after modelmem)")
      ->capture_default_str();
  cmd->add_option("--preload", args->preload,
                  "Path of libmodelmem_preload.so (default: $MODELMEM_PRELOAD, else next to this "
                  "tool)");
  cmd->add_option("--heap-pages", args->heap_pages,
                  "With --small libc: huge puts glibc's heap in transparent huge pages "
                  "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1, unless GLIBC_TUNABLES sets hugetlb "
                  "already); default leaves it alone")
      ->capture_default_str();
  cmd->add_flag("--report", args->report, "Print modelmem's summary at exit (MODELMEM_REPORT=1)");
  cmd->add_option("--trace", args->trace, "Write an allocation trace to FILE (MODELMEM_TRACE)");
  cmd->add_flag("--dry-run", args->dry_run, "Print the command line instead of running it");
  cmd->add_option("command", args->command, "PROGRAM [ARGS...] (after --)")->required();
  cmd->callback([args, cmd, &exit_code] {
    args->conf_given = cmd->count("--conf") > 0;
    exit_code = run(*args);
  });
}

CommandRegistration run_registration(75, &setup_run);

}  // namespace
}  // namespace modelmem::tools
