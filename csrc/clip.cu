// The production gradient clipper. The fused clip is two launches: k_clip_norm (one pass over
// the gradients; its last block computes the total and the scale) ->
// k_clip_scale (returns at once on the device when nothing is clipped; launched with
// programmatic dependent launch so its launch overlaps the norm pass). k_clip_empty stands in
// for a list of empty tensors. The stages alone (k_grad_norm_partial, k_grad_norm_final: the
// reference's per-chunk layout) serve norm_partial / norm_final. Experiments (one cooperative
// launch, AdamW with the clip folded in) live in csrc/dev/ and are built only by the
// benchmarks.
//
// Compile check (no torch headers on purpose, so this takes seconds on CI):
//     nvcc -arch=sm_90 -c csrc/clip.cu -o /tmp/clip.o
// The torch binding is csrc/binding.cpp; the pure-torch mirror of every stage is
// andrea_diag/clip/reference.py (same epsilon, same scale formula).
//
// Design notes (why):
//   * Tensor metadata travels as a by-value kernel parameter (SpanTable / TensorTable, < 4 KB),
//     so no pointer table is copied host->device and nothing syncs; a CUDA graph captures it.
//   * Grids are persistent (SMs x 3) and each block owns ONE contiguous run of 256-element
//     tiles, balanced to a tile: a block streams its run with 16-byte loads, 4 in flight per
//     thread, and reduces only where a tensor ends (not every chunk), so the 12m set's many
//     small tensors cost no per-chunk block reductions and no block waits for a slow last wave.
//   * Deterministic: float32 only within a trip of <= 32 elements, float64 per thread, per
//     block piece, per tensor (pieces in block order) and for the total (pieces in order). The
//     only atomics are integer counters; the grid is fixed (span_grid), so run to run the bits
//     are the same whichever block finishes last.
//   * The scale stays in device memory; k_clip_scale reads it and exits when it is exactly 1,
//     so an unclipped step costs one read pass plus a launch that PDL hides behind the norm pass.
#include "clip.h"

#include <atomic>
#include <cstdlib>

#include "clip_device.cuh"
#include "multi_tensor.cuh"

namespace andrea_clip {
namespace {

// Parked: the pieces reduced per warp (norm_run_parked, the default); else one block reduction
// per piece (norm_run), kept so that bench-kernels can time both side by side.
template <typename T, NormKind K, bool Parked, int L>
__global__ void __launch_bounds__(kThreads, kNormBlocksPerSm)
    k_clip_norm(const __grid_constant__ SpanTable tt, float p, float max_norm, const ClipOut out,
                int seg_base) {
  __shared__ double shd[kWarps];
  __shared__ int flag[3];
  // Lets the scale launch (programmatic dependent launch) be scheduled now; it waits for this
  // whole grid, memory included, before it reads anything (k_clip_scale).
  let_dependents_launch();
  if constexpr (Parked) {
    __shared__ double parked[kParked][kWarps];
    norm_run_parked<T, K, L>(tt, blockIdx.x, gridDim.x, seg_base, p, max_norm, out, shd, flag,
                             parked);
  } else {
    norm_run<T, K>(tt, blockIdx.x, gridDim.x, seg_base, p, max_norm, out, shd, flag);
  }
}

template <NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_clip_empty(float p, float max_norm, const ClipOut out) {
  __shared__ double shd[kWarps];
  final_total<K>(out, p, max_norm, shd);
}

// Same grid and runs as k_clip_norm, each walked backwards (span_scale).
template <typename T>
__global__ void __launch_bounds__(kThreads, kNormBlocksPerSm)
    k_clip_scale(const __grid_constant__ SpanTable tt, const float* scale) {
  wait_for_previous_grid();  // no-op unless launched with PDL; then: the norm pass is done
  const float s = __ldcg(scale);  // uniform across the grid
  if (s == 1.0f) return;          // unclipped step: no second pass over the gradients
  for_each_span<true>(tt, blockIdx.x, gridDim.x, [&](int t, int64_t e0, int64_t e1) {
    span_scale<T>(static_cast<T*>(tt.ptr[t]) + e0, e1 - e0, s);
  });
}

// ---- the stages alone ---------------------------------------------------------------------

// 3 x 512 threads per SM: while some blocks reduce a chunk (two __syncthreads), the others
// keep loads in flight (40 registers, no spills in the L2 and inf paths).
template <typename T, NormKind K>
__global__ void __launch_bounds__(kThreads, kNormBlocksPerSm)
    k_grad_norm_partial(const __grid_constant__ GradTable tt, float p,
                        float* __restrict__ partials) {
  __shared__ float sh[kWarps];
  for_each_chunk(tt, [&](int t, int c, int64_t off, int n) {
    const T* g = static_cast<const T*>(tt.ptr[0][t]) + off;
    const float r = chunk_reduce<T, K>(g, n, p, sh);
    if (threadIdx.x == 0) partials[tt.global_start[t] + c] = r;
  });
}

template <NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_grad_norm_final(const float* partials, float p, float max_norm, const NormOut out) {
  __shared__ double shd[kWarps];
  final_block<K>(partials, p, max_norm, out, shd);
}

// dst = src where *flag, read on the device; else the launch returns at once. The
// optimizer-state probe's copies kept for a spike that may come: the host bounds which updates
// can be one, and the device decides from the update's own loss and norm, with no host sync.
// A plain copy: 16-byte loads and stores when both chunks are aligned, a scalar tail.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_copy_if(const __grid_constant__ TensorTable<2> tt, const bool* flag) {
  if (!*flag) return;  // uniform across the grid
  for_each_chunk(tt, [&](int t, int, int64_t off, int n) {
    const T* src = static_cast<const T*>(tt.ptr[0][t]) + off;
    T* dst = static_cast<T*>(tt.ptr[1][t]) + off;
    constexpr int V = 16 / sizeof(T);
    const int nvec = aligned16(src) && aligned16(dst) ? n / V : 0;
    const uint4* sv = reinterpret_cast<const uint4*>(src);
    uint4* dv = reinterpret_cast<uint4*>(dst);
    for (int i = threadIdx.x; i < nvec; i += kThreads) dv[i] = sv[i];
    for (int i = nvec * V + threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  });
}

// One warp: the mean of the signal (a float32 sum; the host's bound carries a margin for its
// rounding), then "not at or below" each bound: also true for a NaN value or a NaN bound, and
// isfinite catches -inf, so every non-finite value is flagged (spike_bound.py's rule).
template <typename T>
__global__ void k_spike_flag(const float* grad_norm, const T* signal, int n, float grad_max,
                             float signal_max, bool* flag) {
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += 32) s += to_f(signal[i]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (threadIdx.x != 0) return;
  const float g = *grad_norm, m = s / static_cast<float>(n);
  *flag = !(isfinite(g) && g <= grad_max) || !(isfinite(m) && m <= signal_max);
}

// Fused Adam's found_inf for the pipelined step: the eager path would not step on a
// non-finite gradient or loss, nor where the clip mode asks to skip.
template <typename T>
__global__ void k_skip_flag(const bool* nonfinite, const T* loss, const bool* skip, float* out) {
  const bool bad = *nonfinite || !isfinite(to_f(*loss)) || (skip && *skip);
  *out = bad ? 1.f : 0.f;
}

// -1: not decided yet (read ANDREA_CLIP_PDL and the device's compute capability on first use).
std::atomic<int> g_pdl{-1};
std::atomic<bool> g_parked{true};  // k_clip_norm's pieces: per warp (default) or per block
std::atomic<int> g_norm_load{kLoadCached};  // k_clip_norm's loads (set_norm_load)

bool device_has_pdl() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it and launch without PDL
    return false;
  }
  return major >= 9;
}

}  // namespace

bool pdl_enabled() {
  int v = g_pdl.load();
  if (v < 0) {
    const char* env = std::getenv("ANDREA_CLIP_PDL");
    const bool off = env != nullptr && env[0] == '0';
    v = !off && device_has_pdl() ? 1 : 0;
    g_pdl.store(v);
  }
  return v == 1;
}

bool set_pdl(bool enabled) {
  const bool before = pdl_enabled();
  g_pdl.store(enabled && device_has_pdl() ? 1 : 0);
  return before;
}

bool set_parked_pieces(bool enabled) { return g_parked.exchange(enabled); }

int set_norm_load(int mode) {
  if (mode != kLoadCached && mode != kLoadEvictFirst && mode != kLoadStream) return -1;
  return g_norm_load.exchange(mode);
}

cudaError_t launch_clip_norm(const SpanTable& tt, DType dt, NormKind nk, float p, float max_norm,
                             const ClipOut& out, int seg_base, int grid, cudaStream_t stream) {
  if (tt.n == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    return ANDREA_DISPATCH_NORM(nk, K, [&] {
      const int load = g_norm_load.load();
      if (!g_parked.load())
        k_clip_norm<T, K, false, kLoadCached>
            <<<grid, kThreads, 0, stream>>>(tt, p, max_norm, out, seg_base);
      else if (load == kLoadEvictFirst)
        k_clip_norm<T, K, true, kLoadEvictFirst>
            <<<grid, kThreads, 0, stream>>>(tt, p, max_norm, out, seg_base);
      else if (load == kLoadStream)
        k_clip_norm<T, K, true, kLoadStream>
            <<<grid, kThreads, 0, stream>>>(tt, p, max_norm, out, seg_base);
      else
        k_clip_norm<T, K, true, kLoadCached>
            <<<grid, kThreads, 0, stream>>>(tt, p, max_norm, out, seg_base);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_clip_empty(NormKind nk, float p, float max_norm, const ClipOut& out,
                              cudaStream_t stream) {
  return ANDREA_DISPATCH_NORM(nk, K, [&] {
    k_clip_empty<K><<<1, kThreads, 0, stream>>>(p, max_norm, out);
    return cudaGetLastError();
  });
}

cudaError_t launch_clip_scale(const SpanTable& tt, DType dt, const float* scale, int grid,
                              bool after_norm, cudaStream_t stream) {
  if (tt.n == 0) return cudaSuccess;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = after_norm && pdl_enabled() ? 1 : 0;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_clip_scale<T>, tt, scale);
    if (e != cudaSuccess && cfg.numAttrs == 1) {
      // A driver or capture mode that refuses the attribute: clear the (non-sticky) launch
      // error, launch as a plain stream-ordered kernel, and stop asking for PDL.
      (void)cudaGetLastError();
      g_pdl.store(0);
      cfg.numAttrs = 0;
      e = cudaLaunchKernelEx(&cfg, k_clip_scale<T>, tt, scale);
    }
    return e;
  });
}

cudaError_t launch_norm(const GradTable& tt, DType dt, NormKind nk, float p, float* partials,
                        cudaStream_t stream) {
  const int n_items = tt.local_start[tt.n];
  if (n_items == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    return ANDREA_DISPATCH_NORM(nk, K, [&] {
      int grid = 0;
      const cudaError_t e = persistent_grid<k_grad_norm_partial<T, K>>(n_items, &grid);
      if (e != cudaSuccess) return e;
      k_grad_norm_partial<T, K><<<grid, kThreads, 0, stream>>>(tt, p, partials);
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

cudaError_t launch_copy_if(const TensorTable<2>& tt, DType dt, const bool* flag,
                           cudaStream_t stream) {
  const int n_items = tt.local_start[tt.n];
  if (n_items == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    int grid = 0;
    const cudaError_t e = persistent_grid<k_copy_if<T>>(n_items, &grid);
    if (e != cudaSuccess) return e;
    k_copy_if<T><<<grid, kThreads, 0, stream>>>(tt, flag);
    return cudaGetLastError();
  });
}

cudaError_t launch_spike_flag(const float* grad_norm, const void* signal, DType dt, int n,
                              float grad_max, float signal_max, bool* flag, cudaStream_t stream) {
  if (n < 1) return cudaErrorInvalidValue;
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    k_spike_flag<T><<<1, 32, 0, stream>>>(grad_norm, static_cast<const T*>(signal), n, grad_max,
                                           signal_max, flag);
    return cudaGetLastError();
  });
}

cudaError_t launch_skip_flag(const bool* nonfinite, const void* loss, DType dt, const bool* skip,
                             float* out, cudaStream_t stream) {
  return ANDREA_DISPATCH_DTYPE(dt, T, [&] {
    k_skip_flag<T><<<1, 1, 0, stream>>>(nonfinite, static_cast<const T*>(loss), skip, out);
    return cudaGetLastError();
  });
}

}  // namespace andrea_clip
