// `modelmem top`: a live view of every publishing process's pools, with allocation rates and
// peaks, refreshed every interval. Plain ANSI escapes; fits an 80x24 terminal; q quits, s
// changes the sort field.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/reader.hpp"
#include "monitor_view.hpp"

namespace modelmem::tools {
namespace {

constexpr std::array<const char*, 9> kSortFields = {
    "reserved", "allocated", "peak", "rate", "bytes", "frag", "oom", "pid", "pool"};

struct Row {
  std::int64_t pid = 0;
  std::string process;
  monitor::PoolSnapshot pool;
  double alloc_rate = 0;  // allocations per second
  double byte_rate = 0;   // bytes allocated per second
};

// Counters seen at the previous refresh, to turn totals into rates.
struct Seen {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t time_ns = 0;
  double alloc_rate = 0;
  double byte_rate = 0;
};
using Key = std::tuple<std::int64_t, std::uint64_t, std::string, std::size_t>;

std::string short_count(double v) {
  if (v < 1000) return fmt::format("{:.0f}", v);
  if (v < 1e6) return fmt::format("{:.1f}k", v / 1e3);
  if (v < 1e9) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.1f}G", v / 1e9);
}

// Restores the terminal however top ends (q, end of -n, SIGINT/SIGTERM).
struct Terminal {
  bool raw = false;
  bool screen = false;
  termios saved{};
  static Terminal* active;

  void enter(bool interactive) {
    screen = interactive;
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
      termios t = saved;
      t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      t.c_cc[VMIN] = 0;
      t.c_cc[VTIME] = 0;
      raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    active = this;
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      if (active != nullptr) active->leave();
      _exit(0);
    };
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    if (screen) write_all("\x1b[?25l");  // hide the cursor
  }
  void leave() {
    if (raw) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    raw = false;
    if (screen) write_all("\x1b[?25h\n");
    screen = false;
  }
  static void write_all(const char* s) {
    for (std::size_t n = std::char_traits<char>::length(s); n > 0;) {
      ssize_t w = ::write(STDOUT_FILENO, s, n);
      if (w <= 0) return;
      s += w;
      n -= static_cast<std::size_t>(w);
    }
  }
};
Terminal* Terminal::active = nullptr;

std::pair<int, int> terminal_size() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    return {ws.ws_row, ws.ws_col};
  }
  return {24, 80};
}

void sort_rows(std::vector<Row>& rows, const std::string& field) {
  auto key = [&](const Row& r) -> double {
    if (field == "reserved") return static_cast<double>(r.pool.reserved);
    if (field == "allocated") return static_cast<double>(r.pool.allocated);
    if (field == "peak") return static_cast<double>(r.pool.peak_allocated);
    if (field == "rate") return r.alloc_rate;
    if (field == "bytes") return r.byte_rate;
    if (field == "frag") return r.pool.fragmentation;
    if (field == "oom") return static_cast<double>(r.pool.oom_count);
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (field == "pid") return a.pid < b.pid;
    if (field == "pool") return a.pool.name < b.pool.name;
    return key(a) > key(b);  // largest first
  });
}

std::string frame(const MachineView& v, std::vector<Row>& rows, const std::string& sort,
                  double interval, int height, int width, bool ansi) {
  std::vector<std::string> lines;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  std::size_t pools = rows.size();
  lines.push_back(
      fmt::format("modelmem top  {}  every {:.1f}s  sort:{}  {} proc {} pools  (q quits)", clock,
                  interval, sort, v.scan.processes.size(), pools));
  lines.push_back(host_line(v));
  for (const auto& d : device_lines(v)) lines.push_back(d);
  if (!v.scan.stale.empty()) {
    lines.push_back(
        fmt::format("{} stale segment(s) of dead processes: `modelmem info` removes them",
                    v.scan.stale.size()));
  }
  lines.push_back("");
  lines.push_back(fmt::format("{:<7} {:<9} {:<10} {:<6} {:>5} {:>5} {:>5} {:>7} {:>6} {:>4} {:>3}",
                              "PID", "PROCESS", "POOL", "DEVICE", "RESV", "ALLOC", "PEAK",
                              "ALLOC/S", "B/S", "FRAG", "OOM"));
  sort_rows(rows, sort);
  std::size_t room = height > static_cast<int>(lines.size()) + 1
                         ? static_cast<std::size_t>(height) - lines.size() - 1
                         : 0;
  std::size_t shown = 0;
  for (const Row& r : rows) {
    if (shown == room) break;
    lines.push_back(fmt::format(
        "{:<7} {:<9} {:<10} {:<6} {:>5} {:>5} {:>5} {:>7} {:>6} {:>4.2f} {:>3}", r.pid,
        cut(r.process, 9), cut(r.pool.name, 10), cut(r.pool.device, 6),
        short_bytes(r.pool.reserved), short_bytes(r.pool.allocated),
        short_bytes(r.pool.peak_allocated), short_count(r.alloc_rate), short_bytes(r.byte_rate),
        r.pool.fragmentation,
        r.pool.oom_count > 999 ? std::string("999") : std::to_string(r.pool.oom_count)));
    ++shown;
  }
  if (rows.empty()) lines.push_back("No process is publishing modelmem pools.");
  if (shown < rows.size()) lines.push_back(fmt::format("... {} more pools", rows.size() - shown));
  std::string out;
  for (std::size_t i = 0; i < lines.size() && i < static_cast<std::size_t>(height); ++i) {
    std::string line = lines[i];
    if (line.size() > static_cast<std::size_t>(width)) line.resize(static_cast<std::size_t>(width));
    out += line;
    out += ansi ? "\x1b[K\n" : "\n";  // clear the rest of the line
  }
  return out;
}

int run_top(double interval, std::string sort, long iterations) {
  const bool interactive = isatty(STDOUT_FILENO) != 0;
  Terminal term;
  term.enter(interactive);
  std::map<Key, Seen> seen;
  for (long frame_no = 0; iterations <= 0 || frame_no < iterations; ++frame_no) {
    monitor::ScanOptions so;
    so.clean_stale = false;  // top only looks; info cleans
    so.max_wait_us = 5000;
    MachineView v = look(so, /*devices=*/true);
    std::vector<Row> rows;
    std::map<Key, Seen> next;
    for (const auto& p : v.scan.processes) {
      for (std::size_t i = 0; i < p.pools.size(); ++i) {
        const auto& pool = p.pools[i];
        Row r{p.pid, p.process_name, pool, 0, 0};
        Key k{p.pid, p.start_time_ns, pool.name, i};
        Seen now{pool.alloc_count, pool.alloc_bytes_total, pool.update_time_ns, 0, 0};
        if (auto it = seen.find(k); it != seen.end()) {
          const Seen& before = it->second;
          if (now.time_ns > before.time_ns && now.count >= before.count) {
            double dt = static_cast<double>(now.time_ns - before.time_ns) / 1e9;
            now.alloc_rate = static_cast<double>(now.count - before.count) / dt;
            now.byte_rate = static_cast<double>(now.bytes - before.bytes) / dt;
          } else {
            // Not republished since: keep the last rate.
            now.alloc_rate = before.alloc_rate;
            now.byte_rate = before.byte_rate;
            now.time_ns = before.time_ns;
            now.count = before.count;
            now.bytes = before.bytes;
          }
        }
        r.alloc_rate = now.alloc_rate;
        r.byte_rate = now.byte_rate;
        next[k] = now;
        rows.push_back(std::move(r));
      }
    }
    seen = std::move(next);
    auto [height, width] = terminal_size();
    std::string text = frame(v, rows, sort, interval, interactive ? height : 1000,
                             interactive ? width : 1000, interactive);
    if (interactive) {
      text = "\x1b[H" + text + "\x1b[J";  // home, draw, clear below
    } else {
      text += "\n";
    }
    Terminal::write_all(text.c_str());
    if (iterations > 0 && frame_no + 1 >= iterations) break;

    // Wait for the next refresh, answering keys meanwhile.
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(interval);
    bool redraw = false;
    while (!redraw) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      until - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      pollfd pfd{STDIN_FILENO, POLLIN, 0};
      int n = term.raw ? poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (n <= 0) {
        if (!term.raw) usleep(static_cast<useconds_t>(left) * 1000);
        break;
      }
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) != 1) {
        // stdin closed: nothing more will come; keep refreshing on the clock.
        usleep(static_cast<useconds_t>(std::max<long>(left, 0)) * 1000);
        break;
      }
      if (c == 'q' || c == 'Q') {
        term.leave();
        return 0;
      }
      if (c == 's') {
        auto it = std::find(kSortFields.begin(), kSortFields.end(), sort);
        sort =
            (it == kSortFields.end() || it + 1 == kSortFields.end()) ? kSortFields[0] : *(it + 1);
        redraw = true;
      }
    }
  }
  term.leave();
  return 0;
}

void setup(CLI::App& app, int& exit_code) {
  struct Opts {
    double delay = 1.0;
    std::string sort = "reserved";
    long iterations = 0;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("top", "Live view of every process's modelmem pools (q quits)");
  cmd->add_option("-d,--delay", opts->delay, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  std::vector<std::string> fields(kSortFields.begin(), kSortFields.end());
  cmd->add_option("-s,--sort", opts->sort, "Sort by this field, largest first")
      ->check(CLI::IsMember(fields));
  cmd->add_option("-n,--iterations", opts->iterations,
                  "Stop after this many refreshes (default: until q)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback(
      [opts, &exit_code] { exit_code = run_top(opts->delay, opts->sort, opts->iterations); });
}

CommandRegistration reg(61, &setup);

}  // namespace
}  // namespace modelmem::tools
