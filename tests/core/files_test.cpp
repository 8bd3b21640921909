// The one check of an output path (core::output_file_problem, check_output_file) that commands,
// `modelmem run`'s preflight and Python's trace recordings make before any work.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace fs = std::filesystem;
using modelmem::InvalidInput;
using modelmem::core::check_output_file;
using modelmem::core::output_file_problem;
using modelmem::core::OutputWrite;

namespace {

class OutputCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("modelmem_files_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OutputCheck, SaysWhatKeepsAPathFromBeingWritten) {
  const std::string d = dir_.string();
  for (OutputWrite how : {OutputWrite::kReplacing, OutputWrite::kInPlace}) {
    EXPECT_EQ(output_file_problem(d + "/new.csv", how), "");
    EXPECT_EQ(output_file_problem(d, how), "it is a directory");
    EXPECT_EQ(output_file_problem(d + "/no/x.csv", how), "folder " + d + "/no does not exist");
    EXPECT_EQ(output_file_problem("", how), "an empty file name");
  }
  std::ofstream(dir_ / "file.csv") << "x";
  EXPECT_EQ(output_file_problem(d + "/file.csv/x.csv", OutputWrite::kReplacing),
            d + "/file.csv is not a folder");
  // A symbolic link at the name: replaced by a rename, refused by a file opened in place.
  fs::create_symlink(dir_ / "file.csv", dir_ / "link.csv");
  EXPECT_EQ(output_file_problem(d + "/link.csv", OutputWrite::kReplacing), "");
  EXPECT_EQ(output_file_problem(d + "/link.csv", OutputWrite::kInPlace),
            "it is a symbolic link (not followed)");
  fs::create_hard_link(dir_ / "file.csv", dir_ / "hard.csv");
  EXPECT_EQ(output_file_problem(d + "/hard.csv", OutputWrite::kInPlace),
            "it has another hard link");
  EXPECT_EQ(output_file_problem(d + "/hard.csv", OutputWrite::kReplacing), "");
}

TEST_F(OutputCheck, ThrowsOneLineNamingThePath) {
  const std::string d = dir_.string();
  EXPECT_NO_THROW(check_output_file(d + "/out.json"));
  try {
    check_output_file(d + "/no/out.json", OutputWrite::kReplacing, "--json");
    FAIL() << "a missing folder was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()),
              "--json " + d + "/no/out.json: cannot write: folder " + d + "/no does not exist");
  }
  try {
    check_output_file("");
    FAIL() << "an empty name was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "an empty output file name");
  }
}

}  // namespace
