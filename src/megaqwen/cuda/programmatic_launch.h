// Whether launch_kernel (launch.cuh) launches kernels programmatically: each may start while its
// predecessor in the stream or graph finishes, and waits in pdl_begin() (kernels/common.cuh) for its
// writes. open_cuda_device (device_setup.cpp) sets it from MEGAQWEN_PDL on sm_90 and newer devices.
#pragma once

namespace megaqwen::cuda {

void set_programmatic_launch(bool on);
bool programmatic_launch();

}  // namespace megaqwen::cuda
