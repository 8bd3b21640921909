// The input files every reader goes through (core::check_input_file, read_input_file): a FIFO, a
// device such as /dev/zero, a directory or a file past the reader's bound is refused with one
// line, at once, without reading it.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"

namespace fs = std::filesystem;
using modelmem::InvalidInput;
using modelmem::core::check_input_file;
using modelmem::core::read_input_file;

namespace {

class InputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("modelmem_input_files_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(InputFiles, SpecialFilesAreRefusedWithoutBlocking) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(input_error_of([&] { read_input_file(fifo, "plan", 1 << 20); }),
            fifo + ": is a FIFO, not a plan file");
  EXPECT_EQ(input_error_of([&] { check_input_file(fifo, "trace"); }),
            fifo + ": is a FIFO, not a trace file");
  EXPECT_EQ(input_error_of([&] { read_input_file("/dev/zero", "ONNX model", 1 << 20); }),
            "/dev/zero: is a character device, not an ONNX model file");
  EXPECT_EQ(input_error_of([&] { check_input_file(dir_.string(), "trace"); }),
            dir_.string() + ": is a directory, not a trace file");
  EXPECT_EQ(input_error_of([&] { read_input_file((dir_ / "none").string(), "plan", 10); }),
            (dir_ / "none").string() + ": cannot open: no such plan file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A sparse 3 GiB file: refused by its size, before a byte is read (no 3 GiB in memory).
TEST_F(InputFiles, AFileLargerThanTheBoundIsRefusedBeforeItIsRead) {
  const std::string big = (dir_ / "big.onnx").string();
  { std::ofstream(big) << "x"; }
  fs::resize_file(big, std::uintmax_t{3} << 30);
  const std::string msg =
      input_error_of([&] { read_input_file(big, "ONNX model", modelmem::core::kMaxModelInput); });
  EXPECT_EQ(msg, big + ": 3.00 GiB, more than an ONNX model file may hold (2.00 GiB)");
}

TEST_F(InputFiles, ARegularFileIsReadWhole) {
  const std::string path = (dir_ / "plan.json").string();
  std::string text(200000, 'a');
  text += "end";
  { std::ofstream(path, std::ios::binary) << text; }
  EXPECT_EQ(read_input_file(path, "plan", 1 << 20), text);
  EXPECT_NO_THROW(check_input_file(path, "plan", text.size()));
  EXPECT_EQ(input_error_of([&] { check_input_file(path, "plan", text.size() - 1); }).find(path),
            0u);
}

}  // namespace
