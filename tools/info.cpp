// `modelmem info`: device memory, then every publishing process and its pools (the view and
// its renderings are the library's: monitor/view.hpp, monitor/render.hpp).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "command.hpp"
#include "modelmem/monitor/render.hpp"
#include "modelmem/monitor/view.hpp"
#ifdef MODELMEM_HAVE_CUDA
#include "modelmem/monitor/cuda.hpp"
#endif

namespace modelmem::tools {
namespace {

void setup_info(CLI::App& app, int& exit_code) {
  struct Opts {
    std::int64_t pid = 0;
    bool json = false;
    std::string format = "table";
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "info", "Show device memory and every process's modelmem pools (like nvidia-smi, per pool)");
  cmd->add_option("-p,--pid", opts->pid, "Only this process")->check(CLI::PositiveNumber);
  auto* json_flag = cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_option("--format", opts->format, "Output format")
      ->check(CLI::IsMember({"table", "json", "prometheus"}))
      ->excludes(json_flag);
  cmd->callback([opts, &exit_code] {
    monitor::ScanOptions so;
    if (opts->pid > 0) so.pid = opts->pid;
#ifdef MODELMEM_HAVE_CUDA
    monitor::register_cuda_memory_query();
#endif
    monitor::MachineView v = monitor::look(so, /*devices=*/true);
    std::string format = opts->json ? "json" : opts->format;
    std::fputs(monitor::info_report(v, format).c_str(), stdout);
    if (format != "json") {
      for (const auto& s : v.scan.stale) {
        std::string who = s.process_name.empty() ? "" : " (" + s.process_name + ")";
        std::fprintf(stderr, "modelmem info: %s stale segment %s of pid %lld%s: %s\n",
                     s.removed ? "removed" : "found", s.segment.c_str(),
                     static_cast<long long>(s.pid), who.c_str(), s.why.c_str());
      }
    }
    for (const auto& n : v.notes) std::fprintf(stderr, "modelmem info: note: %s\n", n.c_str());
    exit_code = (opts->pid > 0 && v.scan.processes.empty()) ? 1 : 0;
    if (exit_code == 1) {
      // Say which pid, and whether it runs at all (the report above only says nobody publishes).
      const bool runs = std::filesystem::exists("/proc/" + std::to_string(opts->pid));
      std::fprintf(stderr, "modelmem info: pid %lld publishes no modelmem pools%s\n",
                   static_cast<long long>(opts->pid), runs ? "" : " (no such process)");
    }
  });
}

CommandRegistration info_registration(60, &setup_info);

}  // namespace
}  // namespace modelmem::tools
