// modelmem viz's page: self-contained, drawn by headless Chromium at the window's width without
// errors or clipped tick labels, its legend naming only what the trace holds.
#include "modelmem/trace/viz.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/command.hpp"
#include "synthetic.hpp"

namespace modelmem::trace {
namespace {

using testing::add_step;
using testing::TraceBuilder;

std::string run(const std::string& command) {
  return modelmem::testing::run_command(command).out;
}

Trace sample() {
  TraceBuilder b("viz </script> sample");
  b.segment(0x7f0000000000, 64 << 20);
  for (std::size_t scale : {1, 2, 1}) add_step(b, scale, true);
  b.alloc(1 << 20, 1);  // never freed, second pool
  b.oom(1ull << 40);
  return b.trace();
}

TEST(Viz, PageIsSelfContained) {
  std::stringstream out;
  write_viz_html(sample(), out);
  std::string html = out.str();
  EXPECT_NE(html.find("<canvas id=\"blocks\""), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  // The trace name holds "</script>": it must not end the script early.
  EXPECT_EQ(html.find("</script> sample"), std::string::npos);
}

TEST(Viz, LegendNamesReservedOnlyWhenTheTraceHasIt) {
  std::stringstream with;
  write_viz_html(sample(), with);
  EXPECT_NE(with.str().find("solid: allocated, dashed: reserved"), std::string::npos);
  TraceBuilder b("no segments");
  add_step(b, 1, true);
  std::stringstream without;
  write_viz_html(b.trace(), without);
  EXPECT_EQ(without.str().find("dashed"), std::string::npos);
  EXPECT_NE(without.str().find("the trace has no segment events"), std::string::npos);
}

TEST(Viz, RendersInHeadlessChromiumWithoutErrors) {
  const char* chromium = "/usr/bin/chromium";
  if (::access(chromium, X_OK) != 0) GTEST_SKIP() << "chromium not installed at " << chromium;
  auto dir =
      std::filesystem::temp_directory_path() / ("modelmem_viz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto page = dir / "trace.html";
  {
    std::ofstream out(page);
    write_viz_html(sample(), out);
  }
  std::string dom =
      run(std::string(chromium) +
          " --headless --no-sandbox --disable-gpu --no-first-run"
          " --disable-background-networking --disable-component-update"
          " --disable-sync --window-size=1500,900 --user-data-dir=" +
          (dir / "profile").string() + " --virtual-time-budget=5000 --dump-dom file://" +
          page.string() + " 2>/dev/null");
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(dom.empty()) << "chromium printed nothing";
  EXPECT_NE(dom.find("data-rendered=\"1\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_EQ(dom.find("data-error=\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("rendered 40 blocks"), std::string::npos);
  // The canvases take the window's width (they were 1200 pixels whatever the window), and no
  // x tick label runs off the canvas (the last one lost its unit).
  const std::size_t at = dom.find("data-width=\"");
  ASSERT_NE(at, std::string::npos) << dom.substr(0, 2000);
  const int width = std::stoi(dom.substr(at + 12));
  EXPECT_GT(width, 1400);
  EXPECT_LE(width, 1500);
  EXPECT_NE(dom.find("<canvas id=\"mem\" width=\"" + std::to_string(width) + "\""),
            std::string::npos)
      << dom.substr(0, 2000);
  EXPECT_NE(dom.find("data-clipped-ticks=\"0\""), std::string::npos) << dom.substr(0, 2000);
}

}  // namespace
}  // namespace modelmem::trace
