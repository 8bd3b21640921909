// The `modelmem` command: every subcommand registered by its file, errors as one line with an
// exit code (2 bad input, 1 another modelmem error such as out of memory, 3 internal).
#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
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

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "Value 0 not in range 0.000000 to 1797693134862315708...": CLI11 prints the bounds of
// PositiveNumber and NonNegativeNumber as full doubles (the smallest positive double shows as
// 0.000000). Said in words instead.
std::string human_ranges(const std::string& message) {
  static const std::regex range(R"(Value (\S+) not in range ([-+0-9.eE]+) to ([-+0-9.eE]+))");
  std::smatch m;
  if (!std::regex_search(message, m, range)) return message;
  auto number = [](double v) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  double value = 0, low = 0, high = 0;
  try {
    value = std::stod(m[1].str());
    low = std::stod(m[2].str());
    high = std::stod(m[3].str());
  } catch (const std::exception&) {
    return message;
  }
  std::string words;
  if (high > 1e300 && low == 0)  // 0 rejected: the bound is the smallest positive double
    words = value == 0 ? "must be a positive number" : "must not be negative";
  else if (high > 1e300)
    words = "must be at least " + number(low);
  else
    words = "must be between " + number(low) + " and " + number(high);
  return m.prefix().str() + "value " + m[1].str() + " " + words + m.suffix().str();
}

}  // namespace

CommandRegistration::CommandRegistration(int order, CommandSetup setup) {
  registry().emplace_back(order, setup);
}

std::string nearest_command(const CLI::App& app, const std::string& word) {
  std::string best;
  std::size_t best_distance = 0;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    std::size_t d = edit_distance(word, sub->get_name());
    if (best.empty() || d < best_distance) best = sub->get_name(), best_distance = d;
  }
  return best_distance <= std::max<std::size_t>(2, word.size() / 3) ? best : "";
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
  // The first word that is not an option names the command: an unknown one is named, with the
  // nearest command when one is close.
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (!word.empty() && word[0] == '-') continue;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      known = known || sub->check_name(word);
    if (known) break;
    std::string near = tools::nearest_command(app, word);
    std::fprintf(stderr, "modelmem: error: unknown command '%s'%s (modelmem --help lists them)\n",
                 word.c_str(), near.empty() ? "" : (", did you mean '" + near + "'?").c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "modelmem: error: %s\n", tools::human_ranges(e.what()).c_str());
    return 2;
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
