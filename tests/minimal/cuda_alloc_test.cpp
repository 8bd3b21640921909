// libmodelmem_cuda_alloc.so through its C functions, loaded with dlopen as PyTorch loads it.
//   minimal_cuda_alloc LIB errors : a bad MODELMEM_ALLOC_CONF is refused naming the key; without
//                                   a GPU, allocation fails saying why (runs anywhere)
//   minimal_cuda_alloc LIB gpu    : allocations on the GPU, statistics, publishing (GPU only)
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "check.hpp"
#include "modelmem/config/listener_abi.h"
#include "modelmem/device/cuda.hpp"
#include "modelmem/monitor/reader.hpp"

namespace {

using AllocFn = void* (*)(ssize_t, int, cudaStream_t);
using FreeFn = void (*)(void*, size_t, int, cudaStream_t);
using StatsFn = int (*)(int, unsigned long long*, int);
using TrimFn = void (*)(int);

struct Lib {
  void* handle = nullptr;
  AllocFn alloc = nullptr;
  FreeFn free = nullptr;
  StatsFn stats = nullptr;
  TrimFn trim = nullptr;
};

Lib load(const char* path) {
  Lib l;
  l.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (l.handle == nullptr) {
    std::printf("dlopen %s: %s\n", path, dlerror());
    std::exit(1);
  }
  l.alloc = reinterpret_cast<AllocFn>(dlsym(l.handle, "modelmem_alloc"));
  l.free = reinterpret_cast<FreeFn>(dlsym(l.handle, "modelmem_free"));
  l.stats = reinterpret_cast<StatsFn>(dlsym(l.handle, "modelmem_cuda_stats"));
  l.trim = reinterpret_cast<TrimFn>(dlsym(l.handle, "modelmem_cuda_trim"));
  MM_CHECK(l.alloc && l.free && l.stats && l.trim);
  // Only the C surface is exported: no modelmem or CUDA runtime symbol leaks out.
  MM_CHECK(dlsym(l.handle, "cudaMalloc") == nullptr);
  return l;
}

std::string alloc_error(const Lib& l) {
  try {
    void* p = l.alloc(1024, 0, nullptr);
    if (p != nullptr) l.free(p, 1024, 0, nullptr);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// A fresh process per configuration: the library builds its allocator once per device.
int in_child(const char* conf, const char* lib, bool expect_key_error) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MODELMEM_ALLOC_CONF", conf, 1);
    Lib l = load(lib);
    std::string err = alloc_error(l);
    bool ok = expect_key_error ? err.find("bogus_key") != std::string::npos
                               : err.find("cuda:0") != std::string::npos;
    if (!ok) std::printf("config '%s': unexpected outcome '%s'\n", conf, err.c_str());
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int errors(const char* lib) {
  MM_CHECK(in_child("bogus_key:1", lib, true) == 0);
  if (!modelmem::device::cuda_availability().available) {
    // A good config without a GPU: the error names the device and the reason.
    MM_CHECK(in_child("expandable_segments:True", lib, false) == 0);
  }
  Lib l = load(lib);
  MM_CHECK(l.alloc(0, 0, nullptr) == nullptr);
  bool threw = false;
  try {
    l.alloc(16, 1000, nullptr);
  } catch (const std::runtime_error& e) {
    threw = std::strstr(e.what(), "out of range") != nullptr;
  }
  MM_CHECK(threw);
  // The pool selection of per-model pools and the listeners are exported for ctypes.
  for (const char* name :
       {"modelmem_cuda_pool_push", "modelmem_cuda_pool_pop", "modelmem_cuda_last_error",
        "modelmem_cuda_add_listener", "modelmem_cuda_remove_listener"})
    MM_CHECK(dlsym(l.handle, name) != nullptr);
  auto why = reinterpret_cast<const char* (*)()>(dlsym(l.handle, "modelmem_cuda_last_error"));
  // A failed free replaces the thread's last error: a pointer modelmem never handed out (on a
  // GPU), or a device whose allocator cannot be built (without one).
  alignas(256) static char not_ours[256];
  l.free(not_ours, sizeof not_ours, 0, nullptr);
  char expected[64];
  std::snprintf(expected, sizeof expected,
                "free of %p on cuda:0 failed: ", static_cast<void*>(not_ours));
  MM_CHECK(std::strncmp(why(), expected, std::strlen(expected)) == 0);
  std::printf("failed free: %s\n", why());
  auto add = reinterpret_cast<int (*)(void (*)(const void*, void*), void*)>(
      dlsym(l.handle, "modelmem_cuda_add_listener"));
  auto remove = reinterpret_cast<int (*)(int)>(dlsym(l.handle, "modelmem_cuda_remove_listener"));
  MM_CHECK(add(nullptr, nullptr) == -1 && std::strstr(why(), "no function") != nullptr);
  MM_CHECK(remove(0) == -1 && std::strstr(why(), "no listener 0") != nullptr);
  auto ignore = [](const void*, void*) {};
  const int id = add(ignore, nullptr);
  MM_CHECK(id >= 0 && remove(id) == 0);
  return minimal::finish("minimal.cuda_alloc_errors");
}

// Two models' pools in one process (pools:[...]): each thread's selection routes its
// allocations, a breach fails in that pool alone, an unknown name is refused.
int pools_in_child(const char* lib) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MODELMEM_ALLOC_CONF", "pools:[bert:64,resnet:32]", 1);
    Lib l = load(lib);
    auto push = reinterpret_cast<int (*)(const char*)>(dlsym(l.handle, "modelmem_cuda_pool_push"));
    auto pop = reinterpret_cast<int (*)()>(dlsym(l.handle, "modelmem_cuda_pool_pop"));
    auto why = reinterpret_cast<const char* (*)()>(dlsym(l.handle, "modelmem_cuda_last_error"));
    bool ok = push("resnet") == 0;
    void* small = l.alloc(8 << 20, 0, nullptr);
    bool breach = false;
    try {
      l.alloc(40 << 20, 0, nullptr);  // over resnet's 32 MiB
    } catch (const std::runtime_error& e) {
      breach = std::strstr(e.what(), "resnet") != nullptr;
    }
    ok = ok && small != nullptr && breach && pop() == 0;
    ok = ok && push("bert") == 0;
    void* big = l.alloc(40 << 20, 0, nullptr);  // fits bert's 64 MiB
    ok = ok && big != nullptr && pop() == 0 && pop() == -1;
    ok = ok && push("nope") == -1 && std::strstr(why(), "nope") != nullptr;
    l.free(small, 8 << 20, 0, nullptr);
    l.free(big, 40 << 20, 0, nullptr);
    if (!ok) std::printf("pools: unexpected outcome (%s)\n", why());
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int gpu(const char* lib) {
  auto a = modelmem::device::cuda_availability();
  if (!a.available) return minimal::skip("the pluggable allocator needs a GPU: " + a.reason);
  setenv("MODELMEM_ALLOC_CONF", "expandable_segments:True", 1);
  setenv("MODELMEM_MONITOR_INTERVAL_MS", "20", 1);
  setenv("MODELMEM_POOL_NAME", "minimal-test", 1);
  Lib l = load(lib);
  // A listener (MemoryLogger's way in) sees the allocation with its device, size and stream.
  struct Seen {
    int allocs = 0;
    bool ok = true;
  } seen_events;
  auto add = reinterpret_cast<int (*)(modelmem_event_fn, void*)>(
      dlsym(l.handle, "modelmem_cuda_add_listener"));
  auto remove = reinterpret_cast<int (*)(int)>(dlsym(l.handle, "modelmem_cuda_remove_listener"));
  modelmem_event_fn on_event = [](const modelmem_event* e, void* user) {
    auto* s = static_cast<Seen*>(user);
    if (e->kind != MODELMEM_EVENT_ALLOC) return;
    ++s->allocs;
    s->ok = s->ok && e->device == 0 && std::strcmp(e->device_name, "cuda:0") == 0 &&
            std::strcmp(e->pool_name, "minimal-test") == 0 && e->stream != nullptr;
  };
  const int listener = add(on_event, &seen_events);
  MM_CHECK(listener >= 0);
  cudaStream_t stream = nullptr;
  MM_CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  void* p = l.alloc(5 << 20, 0, stream);
  void* q = l.alloc(300, 0, stream);
  MM_CHECK(p != nullptr && q != nullptr);
  MM_CHECK(remove(listener) == 0);
  MM_CHECK(seen_events.allocs == 2 && seen_events.ok);
  MM_CHECK(cudaMemsetAsync(p, 1, 5 << 20, stream) == cudaSuccess);
  MM_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  unsigned long long st[6] = {};
  MM_CHECK(l.stats(0, st, 6) == 6);
  MM_CHECK(st[1] >= (5u << 20) + 300);  // allocated
  MM_CHECK(st[0] >= st[1]);             // reserved
  MM_CHECK(st[0] % (2u << 20) == 0);    // expandable: whole pages

  // Published for `modelmem info` under the configured pool name.
  modelmem::monitor::ScanOptions o;
  o.pid = getpid();
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    auto s = modelmem::monitor::scan(o);
    if (!s.processes.empty() && !s.processes[0].pools.empty()) {
      const auto& pool = s.processes[0].pools[0];
      seen = pool.name == "minimal-test" && pool.device == "cuda:0" &&
             pool.strategy == "expandable" && pool.allocated == st[1];
    }
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  MM_CHECK(seen);

  // Out of memory: an exception with the numbers, and the allocator still works afterwards.
  bool oom = false;
  try {
    l.alloc(static_cast<ssize_t>(1) << 50, 0, stream);
  } catch (const std::runtime_error& e) {
    oom = std::strstr(e.what(), "out of memory") != nullptr;
    std::printf("expected OOM: %s\n", e.what());
  }
  MM_CHECK(oom);
  l.free(p, 5 << 20, 0, stream);
  l.free(q, 300, 0, stream);
  MM_CHECK(l.stats(0, st, 6) == 6 && st[1] == 0);
  l.trim(0);
  MM_CHECK(l.stats(0, st, 6) == 6 && st[0] == 0);
  cudaStreamDestroy(stream);
  MM_CHECK(pools_in_child(lib) == 0);
  return minimal::finish("minimal.cuda_alloc");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::printf("usage: %s LIB errors|gpu\n", argv[0]);
    return 2;
  }
  if (std::strcmp(argv[2], "errors") == 0) return errors(argv[1]);
  return gpu(argv[1]);
}
