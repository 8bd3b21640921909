// Opening libascendcl.so and resolving what the ACL device uses, by name.
#include "device/acl/acl_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace modelmem::device::acl {
namespace {

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// Where CANN installs the runtime, after the loader's own search (which also finds the copy a
// framework such as torch_npu has already loaded: dlopen then returns that one).
std::vector<std::string> candidates() {
  std::vector<std::string> out{"libascendcl.so"};
  for (const char* var : {"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') out.push_back(std::string(v) + "/lib64/libascendcl.so");
  }
  out.push_back("/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so");
  return out;
}

std::shared_ptr<const Runtime> load(std::string& why) {
  void* lib = nullptr;
  std::string path;
  if (const char* explicit_path = std::getenv("MODELMEM_ACL_LIBRARY");
      explicit_path != nullptr && *explicit_path != '\0') {
    path = explicit_path;
    lib = dlopen(explicit_path, RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      why = "no Ascend runtime here (MODELMEM_ACL_LIBRARY=" + path +
            " cannot be opened: " + (e ? e : "unknown error") + ")";
      return nullptr;
    }
  } else {
    for (const std::string& c : candidates()) {
      lib = dlopen(c.c_str(), RTLD_LAZY | RTLD_LOCAL);
      if (lib != nullptr) {
        path = c;
        break;
      }
    }
    if (lib == nullptr) {
      why = "no Ascend runtime here (libascendcl.so not found; MODELMEM_ACL_LIBRARY names one)";
      return nullptr;
    }
  }
  // The handle is never closed: the framework and other devices may share the library.
  auto rt = std::make_shared<Runtime>();
  rt->path = path;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn) && missing == nullptr) missing = name;
  };
  need("aclInit", rt->init);
  need("aclrtSetDevice", rt->set_device);
  need("aclrtGetDevice", rt->get_device);
  need("aclrtGetDeviceCount", rt->device_count);
  need("aclrtMalloc", rt->malloc);
  need("aclrtFree", rt->free);
  need("aclrtGetMemInfo", rt->mem_info);
  if (missing != nullptr) {
    why = "no usable Ascend runtime here (" + path + " lacks " + missing + ")";
    return nullptr;
  }
  resolve(lib, "aclrtMallocAlign32", rt->malloc_align32);
  resolve(lib, "aclrtResetDevice", rt->reset_device);
  resolve(lib, "aclrtSynchronizeDevice", rt->synchronize_device);
  resolve(lib, "aclrtGetSocName", rt->soc_name);
  auto vmm = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn) && rt->missing_vmm.empty()) rt->missing_vmm = name;
  };
  vmm("aclrtReserveMemAddress", rt->reserve);
  vmm("aclrtReleaseMemAddress", rt->release);
  vmm("aclrtMallocPhysical", rt->malloc_physical);
  vmm("aclrtFreePhysical", rt->free_physical);
  vmm("aclrtMapMem", rt->map);
  vmm("aclrtUnmapMem", rt->unmap);
  resolve(lib, "aclrtMemGetAllocationGranularity", rt->granularity);
  // aclrtUnmapMem does not wait for queued work: unmapping needs a device synchronise.
  if (rt->missing_vmm.empty() && rt->synchronize_device == nullptr)
    rt->missing_vmm = "aclrtSynchronizeDevice";

  Status r = rt->init(nullptr);
  if (r != kSuccess && r != kRepeatInitialize) {
    why = "Ascend runtime " + path + " cannot be initialised: " + call_error("aclInit", r);
    return nullptr;
  }
  return rt;
}

}  // namespace

std::shared_ptr<const Runtime> runtime(std::string& why) {
  static std::mutex mu;
  static std::weak_ptr<const Runtime> current;
  std::lock_guard lock(mu);
  if (auto rt = current.lock()) return rt;
  auto rt = load(why);
  current = rt;
  return rt;
}

std::string call_error(const char* function, Status code) {
  const char* meaning = nullptr;
  switch (code) {
    case kInvalidParam:
      meaning = "invalid parameter";
      break;
    case kUninitialized:
      meaning = "aclInit not called";
      break;
    case kRepeatInitialize:
      meaning = "repeat initialise";
      break;
    case kBadAlloc:
      meaning = "bad allocation";
      break;
    case kInvalidDevice:
      meaning = "invalid device id";
      break;
    case kNoContext:
      meaning = "no device set on this thread";
      break;
    case kFeatureNotSupported:
      meaning = "feature not supported";
      break;
    case kMemoryAllocation:
      meaning = "out of device memory";
      break;
    case kMemoryFree:
      meaning = "memory free error";
      break;
    case kOverLimit:
      meaning = "over limit";
      break;
    case kInternal:
      meaning = "runtime internal error";
      break;
    case kDriverInternal:
      meaning = "driver internal error";
      break;
    default:
      break;
  }
  std::string s = std::string(function) + " returned " + std::to_string(code);
  if (meaning != nullptr) s += std::string(" (") + meaning + ")";
  return s;
}

DeviceScope::DeviceScope(const Runtime& rt, int index) : rt_(rt), index_(index) {
  if (rt_.get_device(&previous_) != kSuccess) previous_ = -1;  // none set on this thread yet
  if (previous_ != index_) status_ = rt_.set_device(index_);
}

DeviceScope::~DeviceScope() {
  if (status_ == kSuccess && previous_ >= 0 && previous_ != index_) rt_.set_device(previous_);
}

}  // namespace modelmem::device::acl
