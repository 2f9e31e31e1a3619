// Stand-in for the CUDA runtime header when device code is compiled for the simt emulator
// (tests/simt): the emulator provides the CUDA names. This folder goes first on the include path
// of emulator tests, ahead of the CUDA toolkit's, so the project's device headers include this.
#pragma once

#include "../simt.h"
