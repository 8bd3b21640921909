#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "command.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::tools {
namespace {
std::vector<std::pair<int, CommandSetup>>& registry() {
  static std::vector<std::pair<int, CommandSetup>> commands;
  return commands;
}
}  // namespace

CommandRegistration::CommandRegistration(int order, CommandSetup setup) {
  registry().emplace_back(order, setup);
}

}  // namespace modelmem::tools

int main(int argc, char** argv) {
  using namespace modelmem;
  CLI::App app{"modelmem: memory planning and allocation for deep-learning model deployment"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "modelmem 0.1.0");
  int exit_code = 0;
  auto& commands = tools::registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : commands) setup(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const InvalidInput& e) {
    std::fprintf(stderr, "modelmem: error: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "modelmem: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelmem: internal error: %s\n", e.what());
    return 3;
  }
  return exit_code;
}
