// Experiment: the whole clip in ONE cooperative launch (persistent grid, one software grid
// barrier), compared against the shipped pipeline by bench-kernels ("cuda_single"). Same
// device building blocks as clip.cu, so it gives the same bits (tests/test_clip_cuda.py).
//     nvcc -arch=sm_90 -I kernels -c kernels/dev/clip_single.cu -o /tmp/single.o
#include "dev.h"

#include "clip_device.cuh"
#include "multi_tensor.cuh"

namespace andrea_clip {
namespace {

// Software grid barrier for a co-resident (cooperative) grid. bar[0] counts arrivals,
// bar[1] is a generation number; the last arriver resets the count, so the words are ready
// for the next barrier and the next launch without any host-side reset.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* gen = bar + 1;
    const unsigned my_gen = *gen;  // read before arriving: it cannot move until we arrive
    __threadfence();               // publish this block's partials before arriving
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == my_gen) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

template <typename T, NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_clip_single(const __grid_constant__ GradTable tt, float p, float max_norm, int apply,
                  float* partials, const NormOut out, unsigned* barrier) {
  __shared__ float sh[kWarps];
  __shared__ double shd[kWarps];
  for_each_chunk(tt, [&](int t, int c, int64_t off, int n) {
    const float r = chunk_reduce<T, K>(static_cast<const T*>(tt.ptr[0][t]) + off, n, p, sh);
    if (threadIdx.x == 0) partials[tt.global_start[t] + c] = r;
  });
  grid_barrier(barrier);
  // Every block reduces the same partials in the same order -> the same norm in every block,
  // which saves a second grid barrier (the partials are a few KB and sit in L2).
  const float norm = static_cast<float>(root<K>(total_of<K>(partials, out.n_partials, shd), p));
  const float s = scale_of(norm, max_norm);
  if (blockIdx.x == 0) final_block<K>(partials, p, max_norm, out, shd);
  if (!apply || s == 1.0f) return;
  for_each_chunk(tt, [&](int t, int, int64_t off, int n) {
    chunk_scale<T>(static_cast<T*>(tt.ptr[0][t]) + off, n, s);
  });
}

}  // namespace

cudaError_t launch_clip_single(const GradTable& tt, DType dt, NormKind nk, float p,
                               float max_norm, bool apply, float* partials, const NormOut& out,
                               unsigned* barrier, cudaStream_t stream) {
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    return ANDREA_DISPATCH_NORM(nk, K, [&] {
      int grid = 0;
      // Cooperative launch needs every block resident: the persistent grid is exactly that.
      cudaError_t e = persistent_grid<k_clip_single<T, K>>(tt.local_start[tt.n], &grid);
      if (e != cudaSuccess) return e;
      int apply_i = apply ? 1 : 0;
      GradTable tt_copy = tt;  // cudaLaunchCooperativeKernel wants non-const argument addresses
      NormOut out_copy = out;
      void* args[] = {&tt_copy, &p, &max_norm, &apply_i, &partials, &out_copy, &barrier};
      return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(k_clip_single<T, K>),
                                         dim3(grid), dim3(kThreads), args, 0, stream);
    });
  });
}

}  // namespace andrea_clip
