// The conformance suite (tests/alloc/conformance.hpp) over every strategy and adaptor on the
// emulated NPU: the same contract the host device passes, through the ACL device (plain
// aclrtMalloc, and the VMM calls for expandable segments).
#include <memory>

#include "acl/emulation.hpp"
#include "alloc/conformance.hpp"
#include "modelmem/device/acl.hpp"

namespace modelmem::alloc::conformance {
namespace {

// A fresh emulation (512 MiB, virtual memory on) for each case's device: the previous case's
// device is gone by then, so the runtime can be reset.
device::DevicePtr emulated_npu() {
  static std::unique_ptr<testing::Emulation> emulation;
  emulation.reset();
  emulation = std::make_unique<testing::Emulation>(
      std::initializer_list<std::pair<std::string, std::string>>{
          {"MODELMEM_EMULATED_ACL_MEMORY_MB", "512"}});
  return device::make_acl_device(0);
}

INSTANTIATE_TEST_SUITE_P(Npu, Conformance,
                         ::testing::ValuesIn(conformance_cases("npu", emulated_npu)),
                         conformance_name);

}  // namespace
}  // namespace modelmem::alloc::conformance
