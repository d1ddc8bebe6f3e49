// Types and kernel macros shared by every cuzk kernel.
//
// The same sources build two ways: by NVRTC for the GPU (__CUDACC__ defined), and by a
// host C++ compiler as a serial emulation that CI runs without a GPU. Kernels are written
// as a sequence of CUZK_THREADS phases; on the GPU each phase ends in __syncthreads(), on
// the host each phase is a loop over the block's threads, so the two agree wherever a
// kernel's threads only communicate across phase boundaries. Inside a phase, leave early
// with `continue` (never `return` or a top-level `break`): both builds then reach the
// barrier / next thread correctly.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;

#ifdef __CUDACC__

#define CUZK_HD __host__ __device__ __forceinline__
#define CUZK_OUTLINE __device__ __noinline__
#define CUZK_KERNEL extern "C" __global__
#define CUZK_THREADS(tid) \
    for (u32 tid = threadIdx.x, cuzk_once_ = 1; cuzk_once_; cuzk_once_ = 0, __syncthreads())
#define CUZK_DYNAMIC_SMEM(type, name)                                  \
    extern __shared__ __align__(16) unsigned char cuzk_smem_raw_[];    \
    type* name = reinterpret_cast<type*>(cuzk_smem_raw_)

#else  // host emulation

#include <stdint.h>
#include <stddef.h>

#define CUZK_HD inline
#define CUZK_OUTLINE __attribute__((noinline))
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define CUZK_KERNEL extern "C"

struct cuzk_dim3 { u32 x, y, z; };
extern "C" {
cuzk_dim3 cuzk_emu_block_idx = {0, 0, 0};
cuzk_dim3 cuzk_emu_block_dim = {1, 1, 1};
cuzk_dim3 cuzk_emu_grid_dim = {1, 1, 1};
unsigned char* cuzk_emu_smem = 0;

// The launcher (modules.py) sets the geometry and shared buffer before calling a kernel once per block.
void cuzk_emu_set_launch(u32 block, u32 grid, u32 block_dim, unsigned char* smem) {
    cuzk_emu_block_idx.x = block;
    cuzk_emu_grid_dim.x = grid;
    cuzk_emu_block_dim.x = block_dim;
    cuzk_emu_smem = smem;
}
}
#define blockIdx cuzk_emu_block_idx
#define blockDim cuzk_emu_block_dim
#define gridDim cuzk_emu_grid_dim
#define CUZK_THREADS(tid) for (u32 tid = 0; tid < blockDim.x; ++tid)
#define CUZK_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(cuzk_emu_smem)

inline u32 atomicAdd(u32* address, u32 value) {
    u32 old = *address;
    *address = old + value;
    return old;
}
inline u32 atomicMax(u32* address, u32 value) {
    u32 old = *address;
    if (value > old) *address = value;
    return old;
}
inline u32 atomicMin(u32* address, u32 value) {
    u32 old = *address;
    if (value < old) *address = value;
    return old;
}

#endif

// Global index of `tid` in a one-dimensional grid.
#define CUZK_GLOBAL_INDEX(tid) ((u64)blockIdx.x * blockDim.x + (tid))
