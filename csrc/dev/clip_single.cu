// Experiment: the whole clip in ONE cooperative launch (persistent grid, one software grid
// barrier), compared against the shipped pair by bench-kernels ("cuda_single"). Same device
// building blocks and the same runs as clip.cu, so it gives the same bits
// (tests/test_clip_cuda.py).
//     nvcc -arch=sm_90 -I csrc -c csrc/dev/clip_single.cu -o /tmp/single.o
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

// Phase 1 is the production norm pass with its default, parked pieces (norm_run_parked), over
// the same runs (virtual block v of G, G from span_grid as in production), so the norm, the
// per-tensor norms and the scale have the production pair's bits while set_parked_pieces is
// left on; the last (virtual) block writes the scale, one grid barrier publishes it, then
// every block scales its runs.
template <typename T, NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_clip_single(const __grid_constant__ SpanTable tt, float p, float max_norm, int apply,
                  const ClipOut out, int G, unsigned* barrier) {
  __shared__ double shd[kWarps];
  __shared__ int flag[3];
  __shared__ double parked[kParked][kWarps];
  for (int v = blockIdx.x; v < G; v += gridDim.x)
    norm_run_parked<T, K>(tt, v, G, 0, p, max_norm, out, shd, flag, parked);
  grid_barrier(barrier);
  const float s = __ldcg(out.scale);
  if (!apply || s == 1.0f) return;
  for (int v = blockIdx.x; v < G; v += gridDim.x)
    for_each_span<true>(tt, v, G, [&](int t, int64_t e0, int64_t e1) {
      span_scale<T>(static_cast<T*>(tt.ptr[t]) + e0, e1 - e0, s);
    });
}

}  // namespace

cudaError_t launch_clip_single(const SpanTable& tt, DType dt, NormKind nk, float p,
                               float max_norm, bool apply, const ClipOut& out, int G,
                               unsigned* barrier, cudaStream_t stream) {
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    return ANDREA_DISPATCH_NORM(nk, K, [&] {
      int grid = 0;
      // Cooperative launch needs every block resident: a persistent grid, at most G blocks.
      cudaError_t e = persistent_grid<k_clip_single<T, K>>(G, &grid);
      if (e != cudaSuccess) return e;
      int apply_i = apply ? 1 : 0;
      SpanTable tt_copy = tt;  // cudaLaunchCooperativeKernel wants non-const argument addresses
      ClipOut out_copy = out;
      void* args[] = {&tt_copy, &p, &max_norm, &apply_i, &out_copy, &G, &barrier};
      return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(k_clip_single<T, K>),
                                         dim3(grid), dim3(kThreads), args, 0, stream);
    });
  });
}

}  // namespace andrea_clip
