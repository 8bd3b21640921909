// A library LD_PRELOADed after libmodelmem_preload.so whose constructor allocates before
// modelmem is ready (the test checks which way round the loader ran them): the test program
// frees these blocks later, through modelmem's free.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

extern "C" {
__attribute__((visibility("default"))) void* modelmem_early_block = nullptr;
__attribute__((visibility("default"))) void* modelmem_early_small = nullptr;
__attribute__((visibility("default"))) int modelmem_early_state = -1;
}

__attribute__((constructor)) static void early_constructor() {
  auto state = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "modelmem_preload_state"));
  modelmem_early_state = state ? state() : -2;
  modelmem_early_block = std::malloc(1 << 20);
  if (modelmem_early_block) std::memset(modelmem_early_block, 0x5a, 1 << 20);
  modelmem_early_small = std::malloc(100);
}
