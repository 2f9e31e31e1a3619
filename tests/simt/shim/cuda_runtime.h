// Stand-in for the CUDA runtime header when device code is compiled for the simt emulator
// (tests/simt): the emulator provides the CUDA names, the emulated runtime (cuda_runtime_api.h here)
// the host API. This folder goes first on the include path of emulator tests, ahead of the CUDA
// toolkit's, so the project's device headers and host code include these.
#pragma once

#include "../simt.h"
#include "cuda_runtime_api.h"
