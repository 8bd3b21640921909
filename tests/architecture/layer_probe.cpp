// A scratch file compiled as if it were part of a layer (tests/architecture/CMakeLists.txt):
// with MODELMEM_PROBE_UPWARD it includes a header of a layer above, which must not compile;
// without it, only what the layer may include, which must.
#include "modelmem/core/error.hpp"
#include "modelmem/plan/problem.hpp"
#ifdef MODELMEM_PROBE_UPWARD
#include MODELMEM_PROBE_UPWARD
#endif

int modelmem_layer_probe() {
  return 0;
}
