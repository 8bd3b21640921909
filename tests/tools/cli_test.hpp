// The fixture every `modelmem` CLI test of this folder builds on: a scratch folder per test,
// the built tool run with its stdout and stderr kept apart, and files written into the folder.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

struct CliRun {
  int code = -1;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("modelmem_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) +
            "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// `modelmem ARGS` (ARGS as a shell would split them); with `no_stdin`, stdin is /dev/null.
  CliRun run_cli(const std::string& args, bool no_stdin = false) {
    std::filesystem::path out = dir_ / "stdout", err = dir_ / "stderr";
    std::string cmd =
        std::string(MODELMEM_CLI) + " " + args + " >" + out.string() + " 2>" + err.string();
    if (no_stdin) cmd += " </dev/null";
    int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  /// A bad invocation: exit code 2, one line on stderr containing `needle`, nothing on stdout.
  void expect_one_line_error(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    CliRun r = run_cli(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
  std::filesystem::path write(const std::string& name, const std::string& text) {
    std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }
  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::filesystem::path dir_;
};
