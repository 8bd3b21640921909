// The emulated Ascend runtime from a test's side: points the ACL device at it, sets its knobs
// and reads its test hooks (call counts, fault injection, what it still holds).
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace modelmem::testing {

struct EmulatedAclState {
  std::uint64_t plain_allocations;
  std::uint64_t physical_handles;
  std::uint64_t mappings;
  std::uint64_t reservations;
  std::uint64_t used_bytes;
  std::uint64_t pending_failures;
};

class Emulation {
 public:
  /// Sets MODELMEM_ACL_LIBRARY to the emulation and its knobs (others are cleared), and resets
  /// it so they take effect. The ACL device reloads the runtime once no device holds it.
  explicit Emulation(std::initializer_list<std::pair<std::string, std::string>> knobs = {}) {
    for (const char* k :
         {"MODELMEM_EMULATED_ACL_MEMORY_MB", "MODELMEM_EMULATED_ACL_DEVICES",
          "MODELMEM_EMULATED_ACL_VMM", "MODELMEM_EMULATED_ACL_HIDE", "MODELMEM_EMULATED_ACL_FAIL"})
      unsetenv(k);
    for (const auto& [k, v] : knobs) setenv(k.c_str(), v.c_str(), 1);
    setenv("MODELMEM_ACL_LIBRARY", MODELMEM_EMULATED_ACL, 1);
    lib_ = dlopen(MODELMEM_EMULATED_ACL, RTLD_LAZY | RTLD_LOCAL);
    if (lib_ == nullptr) {
      ADD_FAILURE() << "cannot open " << MODELMEM_EMULATED_ACL << ": " << dlerror();
      return;
    }
    reset_ = reinterpret_cast<void (*)()>(dlsym(lib_, "modelmem_emulated_acl_reset"));
    fail_ = reinterpret_cast<void (*)(const char*, std::uint64_t, int)>(
        dlsym(lib_, "modelmem_emulated_acl_fail"));
    calls_ = reinterpret_cast<std::uint64_t (*)(const char*)>(
        dlsym(lib_, "modelmem_emulated_acl_calls"));
    called_ = reinterpret_cast<const char* (*)()>(dlsym(lib_, "modelmem_emulated_acl_called"));
    state_ =
        reinterpret_cast<void (*)(EmulatedAclState*)>(dlsym(lib_, "modelmem_emulated_acl_state"));
    reset_();
  }
  Emulation(const Emulation&) = delete;
  Emulation& operator=(const Emulation&) = delete;

  void reset() { reset_(); }
  /// The n-th call from now (from 1) of `function` returns `code` once.
  void fail(const std::string& function, std::uint64_t nth, int code = 507899) {
    fail_(function.c_str(), nth, code);
  }
  std::uint64_t calls(const std::string& function) const { return calls_(function.c_str()); }
  std::string called() const { return called_(); }
  EmulatedAclState state() const {
    EmulatedAclState s{};
    state_(&s);
    return s;
  }
  /// Nothing allocated, mapped or reserved is left.
  ::testing::AssertionResult holds_nothing() const {
    EmulatedAclState s = state();
    if (s.plain_allocations == 0 && s.physical_handles == 0 && s.mappings == 0 &&
        s.reservations == 0 && s.used_bytes == 0)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "the emulated NPU still holds " << s.plain_allocations << " allocations, "
           << s.physical_handles << " physical handles, " << s.mappings << " mappings, "
           << s.reservations << " reservations, " << s.used_bytes << " bytes";
  }
  /// A function of the emulation itself (aclInit, aclrtSetDevice, ...), as a framework calls it.
  template <typename F>
  F function(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }

 private:
  void* lib_ = nullptr;
  void (*reset_)() = nullptr;
  void (*fail_)(const char*, std::uint64_t, int) = nullptr;
  std::uint64_t (*calls_)(const char*) = nullptr;
  const char* (*called_)() = nullptr;
  void (*state_)(EmulatedAclState*) = nullptr;
};

}  // namespace modelmem::testing
