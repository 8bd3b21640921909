// Creating output files safely: never following a symbolic link planted at the file's own name,
// never writing through another user's file or a second hard link of one. Used for traces
// (the recorder, the LD_PRELOAD library) and for every file a `modelmem` command writes.
// Reading input files safely: regular files only, bounded, never blocking on a FIFO. Every reader
// of a file a user names (models, plans, traces, snapshots, lists) goes through them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace modelmem::core {

/// Opens `path` for writing from its start: created with `mode` when missing (O_CREAT |
/// O_NOFOLLOW, so a symbolic link at the final component is refused, dangling or not); an
/// existing file must be a regular file owned by this user with one link, and is truncated and
/// given `mode`. Returns the descriptor (O_CLOEXEC), or -1 with errno set and `*why` a static
/// string saying what was refused ("is a symbolic link", ...). No heap use and only
/// async-signal-safe calls: the LD_PRELOAD library calls it in a fork child.
int open_output_file(const char* path, unsigned mode, const char** why) noexcept;

/// Writes `text` to `path` through a temporary file in the same folder, renamed into place: a
/// symbolic link at `path` is replaced, never followed, and readers never see half a file.
/// Throws InvalidInput "PATH: cannot write: why" (the folder missing or not writable, `path` a
/// directory) or Error when a write fails (the temporary file is removed).
void write_file_replacing(const std::string& path, std::string_view text, unsigned mode = 0644);

/// How a file will be written, which decides what at its name is refused.
enum class OutputWrite {
  kReplacing,  ///< write_file_replacing: whatever is at the name is replaced (not a directory)
  kInPlace,    ///< open_output_file (traces): also refuses a symbolic link, another user's file,
               ///< a second hard link or something that is not a regular file
};

/// What keeps `path` from being written as `how` says, or "" when nothing does: "it is a
/// directory", "folder F does not exist", "folder F is not writable (Permission denied)", "it is
/// a symbolic link (not followed)", ... The one check of an output path, made before any work
/// or output (commands, `modelmem run`'s preflight, Python's trace recordings). Allocates.
std::string output_file_problem(const std::string& path, OutputWrite how);

/// InvalidInput "PATH: cannot write: PROBLEM" (the `what` text, when given, goes before PATH:
/// "--json PATH: cannot write: ...") when output_file_problem finds one; an empty path is one too.
void check_output_file(const std::string& path, OutputWrite how = OutputWrite::kReplacing,
                       const std::string& what = "");

/// Limits of the input readers, by what they read (a regular file is bounded by its size; these
/// bound what a reader takes into memory).
inline constexpr std::uint64_t kMaxTextInput = std::uint64_t{256} << 20;  ///< lists, config JSON
inline constexpr std::uint64_t kMaxPlanInput = std::uint64_t{1} << 30;    ///< plan JSON and CSV
inline constexpr std::uint64_t kMaxModelInput = (std::uint64_t{1} << 31) - 1;  ///< ONNX (protobuf)
inline constexpr std::uint64_t kMaxSnapshotInput = std::uint64_t{16} << 30;    ///< pickles

/// Checks that `path` can be read as a `kind` input file ("ONNX model", "plan", "trace", ...):
/// it is opened without blocking (O_NONBLOCK: a FIFO never hangs) and the descriptor's fstat
/// must show a regular file of at most `max_bytes`. Throws InvalidInput with one line: "PATH: no
/// such KIND file", "PATH: is a FIFO, not a KIND file" (a directory, a character device such as
/// /dev/zero, a socket), "PATH: 3.00 GiB, more than a KIND file may hold (2.00 GiB)", "PATH:
/// cannot open: why". For readers that stream the file afterwards.
void check_input_file(const std::string& path, const std::string& kind,
                      std::uint64_t max_bytes = UINT64_MAX);

/// The whole of `path`, checked as check_input_file says on the descriptor it reads from, and
/// never more than `max_bytes` (a file that grows past it while being read is refused too).
std::string read_input_file(const std::string& path, const std::string& kind,
                            std::uint64_t max_bytes);

}  // namespace modelmem::core
