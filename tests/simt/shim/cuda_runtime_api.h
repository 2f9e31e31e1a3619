// Stand-in for <cuda_runtime_api.h> under the simt emulator (see cuda_runtime.h here). Device headers
// that include the host launchers' declarations (megaqwen/cuda/kernels.h, through kernels/sampling.cuh)
// reach this header; those declarations need only the stream type. Nothing here is callable: the
// emulator has no streams (simt::launch runs a grid to completion).
#pragma once

#include "../simt.h"

typedef struct CUstream_st* cudaStream_t;  // as the CUDA runtime declares it (an opaque handle)
