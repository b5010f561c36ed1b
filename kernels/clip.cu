// Fused global-norm gradient clipper: k_grad_norm_partial -> k_grad_norm_final -> k_grad_scale,
// plus k_clip_single, the one-launch variant that the benchmark compares against.
//
// Compile check (no torch headers on purpose, so this takes seconds on CI):
//     nvcc -arch=sm_90 -c kernels/clip.cu -o /tmp/clip.o
// The torch binding is kernels/binding.cpp; the pure-torch mirror of every stage is
// andrea_diag/clip/reference.py (same chunking, same epsilon, same scale formula).
//
// Design notes (why):
//   * Tensor metadata travels as a by-value kernel parameter (TensorList, < 4 KB), so no
//     pointer table is copied host->device and nothing syncs; a CUDA graph captures it as-is.
//   * Each (tensor, chunk) writes its partial into a fixed slot; the final reduction reads
//     the slots in a fixed order in float64. No float atomics anywhere -> same bits every run.
//   * The scale stays in device memory; k_grad_scale reads it and exits when it is exactly 1,
//     so an unclipped step costs one read pass plus two tiny launches.
//   * k_adamw_clipped folds the clip into AdamW: it reads the same device-resident scale and
//     non-finite flag, uses g * scale inside the update and never writes the gradient back, so
//     an active clip costs only the norm pass (1 x gradient bytes) on top of the optimizer.
#include "clip.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace andrea_clip {
namespace {

constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread (memory-level ILP)
constexpr int kWarps = kThreads / 32;
constexpr int kFinalThreads = 512;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// NaN-propagating max: fmaxf drops NaN, but a NaN gradient must make the inf-norm NaN
// (torch's amax propagates it too).
template <typename F>
__device__ __forceinline__ F nan_max(F a, F b) {
  return (b > a || b != b) ? b : a;
}

// Accumulate one element into a running value of kind K.
template <NormKind K>
__device__ __forceinline__ float acc(float a, float x, float p) {
  if constexpr (K == NormKind::L2) {
    return fmaf(x, x, a);
  } else if constexpr (K == NormKind::LINF) {
    return nan_max(a, fabsf(x));
  } else {
    return a + powf(fabsf(x), p);
  }
}

template <NormKind K, typename F>
__device__ __forceinline__ F combine(F a, F b) {
  if constexpr (K == NormKind::LINF) {
    return nan_max(a, b);
  } else {
    return a + b;
  }
}

template <NormKind K, typename F>
__device__ __forceinline__ F warp_reduce(F v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = combine<K>(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;  // valid in lane 0
}

// Fixed-shape tree reduction -> the same bits for the same inputs on every run.
// Result valid in thread 0. `sh` holds one value per warp.
template <NormKind K, typename F>
__device__ __forceinline__ F block_reduce(F v, F* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_reduce<K>(v);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sh[lane] : F(0);
    v = warp_reduce<K>(v);
  }
  return v;
}

// Which (tensor, chunk) block `b` of this launch owns: the last tensor whose local_start <= b.
// Tensors in a TensorList are non-empty, so local_start is strictly increasing.
// Templated on the list type: TensorList (clip) and AdamList (k_adamw_clipped) share it.
template <typename L>
__device__ __forceinline__ void locate(const L& tl, int b, int& t, int& c) {
  int lo = 0, hi = tl.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tl.local_start[mid] <= b) lo = mid; else hi = mid - 1;
  }
  t = lo;
  c = b - tl.local_start[lo];
}

// Sum of |x|^p (or max |x|) over one chunk of n <= kChunk elements; result in thread 0.
template <typename T, NormKind K>
__device__ float chunk_reduce(const T* __restrict__ g, int n, float p, float* sh) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  float a[kUnroll] = {0.f, 0.f, 0.f, 0.f};
  // Views of contiguous tensors can start anywhere: vectorise only 16-byte aligned ones.
  const bool aligned = (reinterpret_cast<uintptr_t>(g) & 15u) == 0;
  const int nvec = aligned ? n / V : 0;
  const uint4* gv = reinterpret_cast<const uint4*>(g);
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = __ldg(gv + i + u * kThreads);  // all loads first
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* e = reinterpret_cast<const T*>(&r[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) a[u] = acc<K>(a[u], to_f(e[k]), p);
    }
  }
  for (; i < nvec; i += kThreads) {
    const uint4 r = __ldg(gv + i);
    const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
    for (int k = 0; k < V; ++k) a[0] = acc<K>(a[0], to_f(e[k]), p);
  }
  for (int j = nvec * V + threadIdx.x; j < n; j += kThreads) a[1] = acc<K>(a[1], to_f(g[j]), p);
  const float v = combine<K>(combine<K>(a[0], a[1]), combine<K>(a[2], a[3]));
  return block_reduce<K>(v, sh);
}

// In place g[i] = g[i] * s over one chunk (computed in fp32, rounded once to T).
template <typename T>
__device__ void chunk_scale(T* __restrict__ g, int n, float s) {
  constexpr int V = 16 / sizeof(T);
  const bool aligned = (reinterpret_cast<uintptr_t>(g) & 15u) == 0;
  const int nvec = aligned ? n / V : 0;
  uint4* gv = reinterpret_cast<uint4*>(g);
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = gv[i + u * kThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      T* e = reinterpret_cast<T*>(&r[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = from_f<T>(to_f(e[k]) * s);
      gv[i + u * kThreads] = r[u];
    }
  }
  for (; i < nvec; i += kThreads) {
    uint4 r = gv[i];
    T* e = reinterpret_cast<T*>(&r);
#pragma unroll
    for (int k = 0; k < V; ++k) e[k] = from_f<T>(to_f(e[k]) * s);
    gv[i] = r;
  }
  for (int j = nvec * V + threadIdx.x; j < n; j += kThreads) g[j] = from_f<T>(to_f(g[j]) * s);
}

// Process block-sized work item b of the list: its partial goes to its fixed slot.
template <typename T, NormKind K>
__device__ __forceinline__ void partial_item(const TensorList& tl, int b, float p,
                                             float* __restrict__ partials, float* sh) {
  int t, c;
  locate(tl, b, t, c);
  const int64_t off = static_cast<int64_t>(c) * kChunk;
  const int64_t left = tl.numel[t] - off;
  const int n = left < kChunk ? static_cast<int>(left) : kChunk;
  const float r = chunk_reduce<T, K>(static_cast<const T*>(tl.ptr[t]) + off, n, p, sh);
  if (threadIdx.x == 0) partials[tl.global_start[t] + c] = r;
}

template <typename T>
__device__ __forceinline__ void scale_item(const TensorList& tl, int b, float s) {
  int t, c;
  locate(tl, b, t, c);
  const int64_t off = static_cast<int64_t>(c) * kChunk;
  const int64_t left = tl.numel[t] - off;
  const int n = left < kChunk ? static_cast<int>(left) : kChunk;
  chunk_scale<T>(static_cast<T*>(tl.ptr[t]) + off, n, s);
}

template <NormKind K>
__device__ __forceinline__ double root(double s, float p) {
  if constexpr (K == NormKind::L2) return sqrt(s);
  else if constexpr (K == NormKind::LINF) return s;
  else return pow(s, 1.0 / static_cast<double>(p));
}

// Total of all partials in float64, fixed order (thread-strided then a fixed tree). Every
// thread of the block gets the result (broadcast through shared memory).
template <NormKind K>
__device__ double total_of(const float* partials, int n_partials, double* shd) {
  double s = 0.0;
  // __ldcg: in the single-launch kernel other blocks wrote these slots; skip the (incoherent) L1.
  for (int j = threadIdx.x; j < n_partials; j += blockDim.x)
    s = combine<K>(s, static_cast<double>(__ldcg(partials + j)));
  s = block_reduce<K>(s, shd);
  __syncthreads();
  if (threadIdx.x == 0) shd[0] = s;
  __syncthreads();
  return shd[0];
}

// Per-tensor norms: warp w handles tensors w, w + nwarps, ...; float64, fixed order.
template <NormKind K>
__device__ void per_tensor_norms(const float* partials, const int32_t* offsets, int n_tensors,
                                 float p, float* per_tensor) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int t = warp; t < n_tensors; t += nw) {
    double s = 0.0;
    for (int j = offsets[t] + lane; j < offsets[t + 1]; j += 32)
      s = combine<K>(s, static_cast<double>(__ldcg(partials + j)));
    s = warp_reduce<K>(s);
    if (lane == 0) per_tensor[t] = static_cast<float>(root<K>(s, p));
  }
}

// torch: clip_coef = max_norm / (total + 1e-6); clamp(max=1) (NaN stays NaN, so a NaN norm
// poisons the gradients exactly as torch's does unless error_if_nonfinite stops it first).
__device__ __forceinline__ float scale_of(float norm, float max_norm) {
  const float coef = max_norm / (norm + kEps);
  return coef != coef ? coef : fminf(coef, 1.0f);
}

template <typename T, NormKind K>
__global__ void __launch_bounds__(kThreads)
    k_grad_norm_partial(const __grid_constant__ TensorList tl, float p, float* partials) {
  __shared__ float sh[kWarps];
  partial_item<T, K>(tl, blockIdx.x, p, partials, sh);
}

template <NormKind K>
__global__ void __launch_bounds__(kFinalThreads)
    k_grad_norm_final(const float* partials, int n_partials, const int32_t* offsets,
                      int n_tensors, float p, float max_norm, float* total, float* per_tensor,
                      float* scale, bool* nonfinite) {
  __shared__ double shd[kFinalThreads / 32];
  per_tensor_norms<K>(partials, offsets, n_tensors, p, per_tensor);
  const double s = total_of<K>(partials, n_partials, shd);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(root<K>(s, p));
    *total = norm;
    *nonfinite = !isfinite(norm);
    *scale = scale_of(norm, max_norm);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_grad_scale(const __grid_constant__ TensorList tl, const float* scale) {
  const float s = *scale;  // uniform across the grid
  if (s == 1.0f) return;   // unclipped step: no second pass over the gradients
  scale_item<T>(tl, blockIdx.x, s);
}

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
    k_clip_single(const __grid_constant__ TensorList tl, float p, float max_norm, int apply,
                  float* partials, int n_partials, const int32_t* offsets, int n_tensors,
                  float* total, float* per_tensor, float* scale, bool* nonfinite,
                  unsigned* barrier) {
  __shared__ float sh[kWarps];
  __shared__ double shd[kWarps];
  const int n_items = tl.local_start[tl.n];
  for (int b = blockIdx.x; b < n_items; b += gridDim.x) partial_item<T, K>(tl, b, p, partials, sh);
  grid_barrier(barrier);
  // Every block reduces the same partials in the same order -> the same norm in every block,
  // which saves a second grid barrier (the partials are a few KB and sit in L2).
  const float norm = static_cast<float>(root<K>(total_of<K>(partials, n_partials, shd), p));
  const float s = scale_of(norm, max_norm);
  if (blockIdx.x == 0) {
    per_tensor_norms<K>(partials, offsets, n_tensors, p, per_tensor);
    if (threadIdx.x == 0) {
      *total = norm;
      *nonfinite = !isfinite(norm);
      *scale = s;
    }
  }
  if (!apply || s == 1.0f) return;
  for (int b = blockIdx.x; b < n_items; b += gridDim.x) scale_item<T>(tl, b, s);
}

template <typename T>
cudaError_t partial_t(const TensorList& tl, NormKind nk, float p, float* partials,
                      cudaStream_t st) {
  const int blocks = tl.local_start[tl.n];
  if (blocks == 0) return cudaSuccess;
  switch (nk) {
    case NormKind::L2: k_grad_norm_partial<T, NormKind::L2><<<blocks, kThreads, 0, st>>>(tl, p, partials); break;
    case NormKind::LINF: k_grad_norm_partial<T, NormKind::LINF><<<blocks, kThreads, 0, st>>>(tl, p, partials); break;
    case NormKind::LP: k_grad_norm_partial<T, NormKind::LP><<<blocks, kThreads, 0, st>>>(tl, p, partials); break;
  }
  return cudaGetLastError();
}

template <typename T, NormKind K>
cudaError_t single_tk(const TensorList& tl, float p, float max_norm, bool apply,
                      float* partials, int n_partials, const int32_t* offsets, int n_tensors,
                      float* total, float* per_tensor, float* scale, bool* nonfinite,
                      unsigned* barrier, cudaStream_t st) {
  auto kernel = k_clip_single<T, K>;
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (e != cudaSuccess) return e;
  int grid = sms * per_sm;
  const int n_items = tl.local_start[tl.n];
  if (n_items < grid) grid = n_items;
  if (grid < 1) grid = 1;
  int apply_i = apply ? 1 : 0;
  TensorList tl_copy = tl;  // cudaLaunchCooperativeKernel wants non-const argument addresses
  void* args[] = {&tl_copy, &p,        &max_norm, &apply_i, &partials,  &n_partials, &offsets,
                  &n_tensors, &total, &per_tensor, &scale, &nonfinite, &barrier};
  // Cooperative launch guarantees that all blocks are resident, which the barrier needs.
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(grid),
                                     dim3(kThreads), args, 0, st);
}

template <typename T>
cudaError_t single_t(const TensorList& tl, NormKind nk, float p, float max_norm, bool apply,
                     float* partials, int n_partials, const int32_t* offsets, int n_tensors,
                     float* total, float* per_tensor, float* scale, bool* nonfinite,
                     unsigned* barrier, cudaStream_t st) {
  switch (nk) {
    case NormKind::L2:
      return single_tk<T, NormKind::L2>(tl, p, max_norm, apply, partials, n_partials, offsets,
                                        n_tensors, total, per_tensor, scale, nonfinite, barrier, st);
    case NormKind::LINF:
      return single_tk<T, NormKind::LINF>(tl, p, max_norm, apply, partials, n_partials, offsets,
                                          n_tensors, total, per_tensor, scale, nonfinite, barrier, st);
    default:
      return single_tk<T, NormKind::LP>(tl, p, max_norm, apply, partials, n_partials, offsets,
                                        n_tensors, total, per_tensor, scale, nonfinite, barrier, st);
  }
}

// ---- AdamW with the clip scale folded in -----------------------------------------------

// Four consecutive gradient elements as floats: one 16-byte load for fp32, one 8-byte load for
// bf16/fp16. __ldcs (evict-first): each gradient is read exactly once by this kernel.
template <typename T>
__device__ __forceinline__ float4 load4(const T* g, int i);
template <>
__device__ __forceinline__ float4 load4<float>(const float* g, int i) {
  return __ldcs(reinterpret_cast<const float4*>(g) + i);
}
template <>
__device__ __forceinline__ float4 load4<__nv_bfloat16>(const __nv_bfloat16* g, int i) {
  const uint2 r = __ldcs(reinterpret_cast<const uint2*>(g) + i);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <>
__device__ __forceinline__ float4 load4<__half>(const __half* g, int i) {
  const uint2 r = __ldcs(reinterpret_cast<const uint2*>(g) + i);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

struct AdamCoef {
  float s;          // clip scale (exactly 1 when the norm is below max_norm)
  float lrwd;       // lr * weight_decay (decoupled decay: p -= lr * wd * p)
  float b1, omb1;   // beta1, 1 - beta1
  float b2, omb2;   // beta2, 1 - beta2
  float step_size;  // lr / (1 - beta1^step), computed in float64 once per block
  float bc2_sqrt;   // sqrt(1 - beta2^step), ditto
  float eps;
};

// torch's fused AdamW order of operations (decay, moments, bias-corrected step), in fp32.
__device__ __forceinline__ void adam_elem(float& p, float& m, float& v, float g,
                                          const AdamCoef& c) {
  g *= c.s;
  p -= c.lrwd * p;
  m = c.b1 * m + c.omb1 * g;
  v = c.b2 * v + c.omb2 * g * g;
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  p -= c.step_size * m / denom;
}

__device__ __forceinline__ void adam4(float4& p, float4& m, float4& v, const float4& g,
                                      const AdamCoef& c) {
  adam_elem(p.x, m.x, v.x, g.x, c);
  adam_elem(p.y, m.y, v.y, g.y, c);
  adam_elem(p.z, m.z, v.z, g.z, c);
  adam_elem(p.w, m.w, v.w, g.w, c);
}

constexpr int kAdamUnroll = 2;  // 2 x (g, p, m, v) 16-byte loads in flight per thread

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_adamw_clipped(const __grid_constant__ AdamList al, AdamHyper h, const float* scale,
                    const bool* nonfinite) {
  // Uniform over the grid: a non-finite norm skips the whole update (params, moments; the step
  // counters were not incremented either), decided on the device so the host never waits.
  if (*nonfinite) return;
  __shared__ float sh_coef[2];
  int t, c;
  locate(al, blockIdx.x, t, c);
  if (threadIdx.x == 0) {
    // Bias corrections in float64 like torch (1 - 0.999^1 loses ~1e-4 relative in fp32).
    const double st = static_cast<double>(*al.step[t]);
    sh_coef[0] = static_cast<float>(static_cast<double>(h.lr) /
                                    (1.0 - pow(static_cast<double>(h.beta1), st)));
    sh_coef[1] = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(h.beta2), st)));
  }
  AdamCoef k;
  k.s = *scale;
  k.lrwd = h.lr * h.weight_decay;
  k.b1 = h.beta1;
  k.omb1 = 1.0f - h.beta1;
  k.b2 = h.beta2;
  k.omb2 = 1.0f - h.beta2;
  k.eps = h.eps;
  __syncthreads();
  k.step_size = sh_coef[0];
  k.bc2_sqrt = sh_coef[1];

  const int64_t off = static_cast<int64_t>(c) * kChunk;
  const int64_t left = al.numel[t] - off;
  const int n = left < kChunk ? static_cast<int>(left) : kChunk;
  const T* __restrict__ g = static_cast<const T*>(al.g[t]) + off;
  float* __restrict__ p = al.p[t] + off;
  float* __restrict__ m = al.m[t] + off;
  float* __restrict__ v = al.v[t] + off;
  // kChunk * sizeof(float) is a multiple of 16, so a chunk is aligned iff its tensor is.
  const bool aligned =
      (((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(m) |
         reinterpret_cast<uintptr_t>(v)) & 15u) == 0) &&
      ((reinterpret_cast<uintptr_t>(g) & (4 * sizeof(T) - 1)) == 0);
  const int n4 = aligned ? n / 4 : 0;
  float4* p4 = reinterpret_cast<float4*>(p);
  float4* m4 = reinterpret_cast<float4*>(m);
  float4* v4 = reinterpret_cast<float4*>(v);
  int i = threadIdx.x;
  for (; i + (kAdamUnroll - 1) * kThreads < n4; i += kAdamUnroll * kThreads) {
    float4 gg[kAdamUnroll], pp[kAdamUnroll], mm[kAdamUnroll], vv[kAdamUnroll];
#pragma unroll
    for (int u = 0; u < kAdamUnroll; ++u) {  // all loads first (memory-level parallelism)
      const int j = i + u * kThreads;
      gg[u] = load4<T>(g, j);
      pp[u] = p4[j];
      mm[u] = m4[j];
      vv[u] = v4[j];
    }
#pragma unroll
    for (int u = 0; u < kAdamUnroll; ++u) {
      const int j = i + u * kThreads;
      adam4(pp[u], mm[u], vv[u], gg[u], k);
      p4[j] = pp[u];
      m4[j] = mm[u];
      v4[j] = vv[u];
    }
  }
  for (; i < n4; i += kThreads) {
    const float4 gg = load4<T>(g, i);
    float4 pp = p4[i], mm = m4[i], vv = v4[i];
    adam4(pp, mm, vv, gg, k);
    p4[i] = pp;
    m4[i] = mm;
    v4[i] = vv;
  }
  for (int j = n4 * 4 + threadIdx.x; j < n; j += kThreads) {  // tail / unaligned views
    float pj = p[j], mj = m[j], vj = v[j];
    adam_elem(pj, mj, vj, to_f(g[j]), k);
    p[j] = pj;
    m[j] = mj;
    v[j] = vj;
  }
}

// torch's fused AdamW increments every step counter before its kernel; here the increment is
// skipped on a non-finite norm (torch's found_inf path adds 1 and subtracts it back).
__global__ void k_step_inc(const __grid_constant__ StepList sl, const bool* nonfinite) {
  if (*nonfinite) return;
  for (int i = threadIdx.x; i < sl.n; i += blockDim.x) *sl.step[i] += 1.0f;
}

}  // namespace

cudaError_t launch_norm_partial(const TensorList& tl, DType dt, NormKind nk, float p,
                                float* partials, cudaStream_t stream) {
  switch (dt) {
    case DType::F32: return partial_t<float>(tl, nk, p, partials, stream);
    case DType::BF16: return partial_t<__nv_bfloat16>(tl, nk, p, partials, stream);
    case DType::F16: return partial_t<__half>(tl, nk, p, partials, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_norm_final(const float* partials, int n_partials, const int32_t* offsets,
                              int n_tensors, NormKind nk, float p, float max_norm,
                              float* total, float* per_tensor, float* scale, bool* nonfinite,
                              cudaStream_t stream) {
  switch (nk) {
    case NormKind::L2:
      k_grad_norm_final<NormKind::L2><<<1, kFinalThreads, 0, stream>>>(
          partials, n_partials, offsets, n_tensors, p, max_norm, total, per_tensor, scale, nonfinite);
      break;
    case NormKind::LINF:
      k_grad_norm_final<NormKind::LINF><<<1, kFinalThreads, 0, stream>>>(
          partials, n_partials, offsets, n_tensors, p, max_norm, total, per_tensor, scale, nonfinite);
      break;
    case NormKind::LP:
      k_grad_norm_final<NormKind::LP><<<1, kFinalThreads, 0, stream>>>(
          partials, n_partials, offsets, n_tensors, p, max_norm, total, per_tensor, scale, nonfinite);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_scale(const TensorList& tl, DType dt, const float* scale,
                         cudaStream_t stream) {
  const int blocks = tl.local_start[tl.n];
  if (blocks == 0) return cudaSuccess;
  switch (dt) {
    case DType::F32: k_grad_scale<float><<<blocks, kThreads, 0, stream>>>(tl, scale); break;
    case DType::BF16: k_grad_scale<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(tl, scale); break;
    case DType::F16: k_grad_scale<__half><<<blocks, kThreads, 0, stream>>>(tl, scale); break;
  }
  return cudaGetLastError();
}

cudaError_t launch_clip_single(const TensorList& tl, DType dt, NormKind nk, float p,
                               float max_norm, bool apply, float* partials, int n_partials,
                               const int32_t* offsets, int n_tensors, float* total,
                               float* per_tensor, float* scale, bool* nonfinite,
                               unsigned* barrier, cudaStream_t stream) {
  switch (dt) {
    case DType::F32:
      return single_t<float>(tl, nk, p, max_norm, apply, partials, n_partials, offsets, n_tensors,
                             total, per_tensor, scale, nonfinite, barrier, stream);
    case DType::BF16:
      return single_t<__nv_bfloat16>(tl, nk, p, max_norm, apply, partials, n_partials, offsets,
                                     n_tensors, total, per_tensor, scale, nonfinite, barrier, stream);
    case DType::F16:
      return single_t<__half>(tl, nk, p, max_norm, apply, partials, n_partials, offsets,
                              n_tensors, total, per_tensor, scale, nonfinite, barrier, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_step_inc(const StepList& sl, const bool* nonfinite, cudaStream_t stream) {
  if (sl.n == 0) return cudaSuccess;
  k_step_inc<<<1, 128, 0, stream>>>(sl, nonfinite);
  return cudaGetLastError();
}

cudaError_t launch_adamw_clipped(const AdamList& al, DType grad_dt, AdamHyper h,
                                 const float* scale, const bool* nonfinite,
                                 cudaStream_t stream) {
  const int blocks = al.local_start[al.n];
  if (blocks == 0) return cudaSuccess;
  switch (grad_dt) {
    case DType::F32:
      k_adamw_clipped<float><<<blocks, kThreads, 0, stream>>>(al, h, scale, nonfinite);
      break;
    case DType::BF16:
      k_adamw_clipped<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(al, h, scale, nonfinite);
      break;
    case DType::F16:
      k_adamw_clipped<__half><<<blocks, kThreads, 0, stream>>>(al, h, scale, nonfinite);
      break;
  }
  return cudaGetLastError();
}

}  // namespace andrea_clip
