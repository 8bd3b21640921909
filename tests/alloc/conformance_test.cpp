// The conformance suite (conformance.hpp) over every strategy and adaptor on the host device.
#include "alloc/conformance.hpp"

#include "modelmem/device/host.hpp"

namespace modelmem::alloc::conformance {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Host, Conformance,
    ::testing::ValuesIn(conformance_cases("host", [] { return device::make_host_device(); })),
    conformance_name);

}  // namespace
}  // namespace modelmem::alloc::conformance
