// MODELMEM_TRACE=T.csv: every process writes its own trace file as it runs (T.csv for the first
// process, T.<pid>.csv for the others, T.<pid>.<n>.csv for a pid used again or an image after
// an exec), flushed at exit, at an exec, at SIGTERM / SIGINT / SIGHUP left at their default and
// when the program signals itself (Python's exit after an uncaught KeyboardInterrupt). A file that
// cannot be created or written is reported on stderr and, under `modelmem run`, in its status
// folder (MODELMEM_TRACE_STATUS), so that `run` exits non-zero.
#pragma once

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

/// Events recorded but not yet in the file at any moment: what a SIGKILL can lose.
constexpr unsigned kTraceChunk = 4096;

/// Opens this process's trace file and starts streaming to it (g_recorder must exist).
void start_trace(const char* path) noexcept;
/// In a fork child: a new file for the new process; the parent's pending events stay its own.
void trace_fork_child() noexcept;
/// Looks up the C library's execvpe, fexecve and signal, which the library's own wrap (flushing
/// the trace first; showing SIG_DFL where it stands in): done at start-up, as a fork child may
/// not call dlsym.
void resolve_exec() noexcept;

}  // namespace modelmem::preload

#pragma GCC visibility pop
