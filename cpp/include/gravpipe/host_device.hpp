// GRAVPIPE_HOST_DEVICE marks functions that the CPU code and the CUDA kernels share (the
// pair interaction, Morton keys, the mixed-precision hi + lo split): __host__ __device__
// under nvcc, nothing elsewhere.
#pragma once

#if defined(__CUDACC__)
#define GRAVPIPE_HOST_DEVICE __host__ __device__
#else
#define GRAVPIPE_HOST_DEVICE
#endif
