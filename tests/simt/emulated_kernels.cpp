// The CUDA engine's kernel launchers (src/megaqwen/cuda/kernels.cu) compiled for the emulated device.
// Function-scope __shared__ variables become per-kernel statics: the emulated runtime runs the blocks
// of these (non-persistent) kernels one after another, so a static is exactly one block's shared memory.
#define __shared__ static
#include "megaqwen/cuda/kernels.cu"
