// The production gradient clipper: k_grad_norm_partial (norm pass; its last block runs the
// final reduction) -> k_grad_scale (skipped on the device when nothing is clipped).
// k_grad_norm_final is the same reduction as its own kernel, for empty lists and the
// stage-alone entry point. Experiments (one cooperative launch, AdamW with the clip folded
// in) live in kernels/dev/ and are built only by the benchmarks.
//
// Compile check (no torch headers on purpose, so this takes seconds on CI):
//     nvcc -arch=sm_90 -c kernels/clip.cu -o /tmp/clip.o
// The torch binding is kernels/binding.cpp; the pure-torch mirror of every stage is
// andrea_diag/clip/reference.py (same chunking, same epsilon, same scale formula).
//
// Design notes (why):
//   * Tensor metadata travels as a by-value kernel parameter (TensorTable, < 4 KB), so no
//     pointer table is copied host->device and nothing syncs; a CUDA graph captures it as-is.
//   * Grids are persistent (SMs x occupancy) and grid-stride over the chunks: no block
//     scheduling per 16384-element chunk, and the early-exit scale launch costs one wave.
//   * Each chunk writes its partial into a fixed slot; the final reduction reads the slots in
//     a fixed order in float64. The only atomic is the integer completion counter, so the
//     bits do not depend on which block finishes last.
//   * The scale stays in device memory; k_grad_scale reads it and exits when it is exactly 1,
//     so an unclipped step costs one read pass plus one near-empty launch.
#include "clip.h"

#include "clip_device.cuh"
#include "multi_tensor.cuh"

namespace andrea_clip {
namespace {

// 3 x 512 threads per SM: while some blocks reduce a chunk (two __syncthreads), the others
// keep loads in flight. Caps registers at 40 per thread (4 blocks, 32 registers, spilled in the
// L2 loop; unbounded, 44 registers allowed only 2 blocks).
constexpr int kNormBlocksPerSm = 3;

template <typename T, NormKind K>
__global__ void __launch_bounds__(kThreads, kNormBlocksPerSm)
    k_grad_norm_partial(const __grid_constant__ GradTable tt, float p, float max_norm,
                        float* __restrict__ partials, const NormOut out) {
  __shared__ float sh[kWarps];
  __shared__ double shd[kWarps];
  __shared__ bool last;
  const int done = for_each_chunk(tt, [&](int t, int c, int64_t off, int n) {
    const T* g = static_cast<const T*>(tt.ptr[0][t]) + off;
    const float r = chunk_reduce<T, K>(g, n, p, sh);
    if (threadIdx.x == 0) partials[tt.global_start[t] + c] = r;
  });
  if (out.done == nullptr) return;
  // Last-block-done (the CUDA threadFenceReduction pattern): publish this block's partials,
  // then count its chunks; the block that completes the count reduces all of them.
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned before = atomicAdd(out.done, static_cast<unsigned>(done));
    last = before + static_cast<unsigned>(done) == static_cast<unsigned>(out.n_partials);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // see every other block's partials (they fenced before counting)
  final_block<K>(partials, p, max_norm, out, shd);
  if (threadIdx.x == 0) atomicExch(out.done, 0u);  // ready for the next call / graph replay
}

template <NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_grad_norm_final(const float* partials, float p, float max_norm, const NormOut out) {
  __shared__ double shd[kWarps];
  final_block<K>(partials, p, max_norm, out, shd);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_grad_scale(const __grid_constant__ GradTable tt, const float* scale) {
  const float s = *scale;  // uniform across the grid
  if (s == 1.0f) return;   // unclipped step: no second pass over the gradients
  for_each_chunk(tt, [&](int t, int, int64_t off, int n) {
    chunk_scale<T>(static_cast<T*>(tt.ptr[0][t]) + off, n, s);
  });
}

}  // namespace

cudaError_t launch_norm(const GradTable& tt, DType dt, NormKind nk, float p, float max_norm,
                        float* partials, const NormOut& out, cudaStream_t stream) {
  const int n_items = tt.local_start[tt.n];
  if (n_items == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    return ANDREA_DISPATCH_NORM(nk, K, [&] {
      int grid = 0;
      const cudaError_t e = persistent_grid<k_grad_norm_partial<T, K>>(n_items, &grid);
      if (e != cudaSuccess) return e;
      k_grad_norm_partial<T, K><<<grid, kThreads, 0, stream>>>(tt, p, max_norm, partials, out);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_norm_final(const float* partials, NormKind nk, float p, float max_norm,
                              const NormOut& out, cudaStream_t stream) {
  return ANDREA_DISPATCH_NORM(nk, K, [&] {
    k_grad_norm_final<K><<<1, kThreads, 0, stream>>>(partials, p, max_norm, out);
    return cudaGetLastError();
  });
}

cudaError_t launch_scale(const GradTable& tt, DType dt, const float* scale,
                         cudaStream_t stream) {
  const int n_items = tt.local_start[tt.n];
  if (n_items == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    int grid = 0;
    const cudaError_t e = persistent_grid<k_grad_scale<T>>(n_items, &grid);
    if (e != cudaSuccess) return e;
    k_grad_scale<T><<<grid, kThreads, 0, stream>>>(tt, scale);
    return cudaGetLastError();
  });
}

}  // namespace andrea_clip
