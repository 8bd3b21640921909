// A scope in which the allocators a thread constructs skip their invariant checks.
#pragma once

namespace modelmem::alloc {

/// While one lives, allocators constructed on this thread do not check their invariants, even in
/// a build with MODELMEM_CHECK_INVARIANTS (or with the environment variable of that name). The
/// sizing layer's replays use it: a `--fit` or a placement replays one model's allocation sequence
/// hundreds of times through the same strategies whose checks the allocator tests run, and with
/// checks on every replay it ran several times longer than the sanitizer build's test limit.
/// Scopes nest; each restores what it found.
class UncheckedScope {
 public:
  UncheckedScope() noexcept;
  ~UncheckedScope();
  UncheckedScope(const UncheckedScope&) = delete;
  UncheckedScope& operator=(const UncheckedScope&) = delete;

 private:
  bool previous_;
};

}  // namespace modelmem::alloc
