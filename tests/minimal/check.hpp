// A few assertion macros for the plain test programs of tests/minimal (no GoogleTest there: the
// GPU machines this build targets have nothing beyond the C++ standard library and CUDA).
// Exit codes: 0 passed, 1 failed, 77 skipped (CTest's SKIP_RETURN_CODE).
#pragma once

#include <cstdio>
#include <exception>
#include <string>

namespace minimal {

inline int& failures() {
  static int n = 0;
  return n;
}

inline constexpr int kSkipped = 77;

inline int skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  return kSkipped;
}

inline int finish(const char* name) {
  if (failures() == 0) {
    std::printf("%s: passed\n", name);
    return 0;
  }
  std::printf("%s: %d check(s) failed\n", name, failures());
  return 1;
}

}  // namespace minimal

#define MM_CHECK(cond)                                                     \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++minimal::failures();                                               \
    }                                                                      \
  } while (0)

#define MM_CHECK_THROWS(stmt, type)                                                     \
  do {                                                                                  \
    bool thrown_ = false;                                                               \
    try {                                                                               \
      stmt;                                                                             \
    } catch (const type&) {                                                             \
      thrown_ = true;                                                                   \
    } catch (const std::exception& e_) {                                                \
      std::printf("%s:%d: %s threw another exception: %s\n", __FILE__, __LINE__, #stmt, \
                  e_.what());                                                           \
    }                                                                                   \
    if (!thrown_) {                                                                     \
      std::printf("%s:%d: %s did not throw %s\n", __FILE__, __LINE__, #stmt, #type);    \
      ++minimal::failures();                                                            \
    }                                                                                   \
  } while (0)
