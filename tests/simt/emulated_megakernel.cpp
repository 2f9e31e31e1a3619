// The megakernel's instantiations and launchers (src/megaqwen/cuda/megakernel/megakernel.cu) compiled
// for the emulated device. The megakernel itself takes the emulator's dynamic shared memory (its CTAs
// run co-resident); select_test_kernel's __shared__ variables become statics, as in emulated_kernels.cpp.
#define __shared__ static
#include "megaqwen/cuda/megakernel/megakernel.cu"
