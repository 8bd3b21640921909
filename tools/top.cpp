// `modelmem top`: a live view of every publishing process's pools, with allocation rates and
// peaks, refreshed every interval. Plain ANSI escapes; fits an 80x24 terminal; q quits, s
// changes the sort field.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/monitor/render.hpp"
#include "modelmem/monitor/view.hpp"
#ifdef MODELMEM_HAVE_CUDA
#include "modelmem/monitor/cuda.hpp"
#endif

namespace modelmem::tools {
namespace {

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

int run_top(double interval, std::string sort, long iterations) {
  const bool interactive = isatty(STDOUT_FILENO) != 0;
  Terminal term;
  term.enter(interactive);
  monitor::PoolRates rates;
#ifdef MODELMEM_HAVE_CUDA
  monitor::register_cuda_memory_query();
#endif
  for (long frame_no = 0; iterations <= 0 || frame_no < iterations; ++frame_no) {
    monitor::ScanOptions so;
    so.clean_stale = false;  // top only looks; info cleans
    so.max_wait_us = 5000;
    monitor::MachineView v = monitor::look(so, /*devices=*/true);
    std::vector<monitor::PoolRow> rows = rates.update(v);
    auto [height, width] = terminal_size();
    monitor::TopFrame frame;
    frame.sort = sort;
    frame.interval_s = interval;
    frame.height = interactive ? height : 1000;
    frame.width = interactive ? width : 1000;
    frame.ansi = interactive;
    std::string text = monitor::top_frame(v, std::move(rows), frame);
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
        const auto& fields = monitor::pool_sort_fields();
        auto it = std::find(fields.begin(), fields.end(), sort);
        sort = (it == fields.end() || it + 1 == fields.end()) ? fields[0] : *(it + 1);
        redraw = true;
      }
    }
  }
  term.leave();
  return 0;
}

void setup_top(CLI::App& app, int& exit_code) {
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
  cmd->add_option("-s,--sort", opts->sort, "Sort by this field, largest first")
      ->check(CLI::IsMember(monitor::pool_sort_fields()));
  cmd->add_option("-n,--iterations", opts->iterations,
                  "Stop after this many refreshes (default: until q)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback(
      [opts, &exit_code] { exit_code = run_top(opts->delay, opts->sort, opts->iterations); });
}

CommandRegistration top_registration(61, &setup_top);

}  // namespace
}  // namespace modelmem::tools
