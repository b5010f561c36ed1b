// Device building blocks of the clip. The fused clip (clip.cu: k_clip_norm, k_clip_scale; the
// single-launch experiment dev/clip_single.cu) works on balanced runs of tiles: span_sum,
// norm_run, span_scale. The stages alone (norm_partial / norm_final, the
// reference's layout) use chunk_reduce and final_block. Shared by production and dev/, so the
// production pair and the single launch give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "clip.h"
#include "multi_tensor.cuh"

namespace andrea_clip {

constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread (memory-level ILP)

// How the norm pass loads the gradients (kLoad* in clip.h), one 16-byte load. kLoadEvictFirst
// marks the lines it brings into L2 as the first to evict: a pass that reads each byte once then
// replaces its own clean lines instead of the lines already in L2 (dirty ones cost a write-back
// each, and in a training step they are the parameters and moments the optimizer reads next).
// kLoadStream is ld.global.cs, the same evict-first allocation in L1 and L2 by the cache
// operator. Below sm_80 (no L2 cache hints) kLoadEvictFirst is the cached load.
// The loaded bits are the same in every mode: only the cache's replacement order differs.
template <int L>
__device__ __forceinline__ uint4 load16(const uint4* p, uint64_t policy) {
  if constexpr (L == kLoadEvictFirst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 r;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(policy));
    return r;
#else
    return __ldg(p);
#endif
  } else if constexpr (L == kLoadStream) {
    return __ldcs(p);
  } else {
    return __ldg(p);
  }
}

// The L2 policy load16<kLoadEvictFirst> passes with each load (0 where no policy is used).
template <int L>
__device__ __forceinline__ uint64_t load_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (L == kLoadEvictFirst)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// Sum of |x|^p (or max |x|) over one chunk of n <= kChunk elements; result in thread 0.
// 128-bit loads when the chunk is 16-byte aligned (kChunk * sizeof(T) is a multiple of 16, so
// a chunk is aligned iff its tensor is); a scalar loop takes the tail and unaligned views.
template <typename T, NormKind K>
__device__ float chunk_reduce(const T* __restrict__ g, int n, float p, float* sh) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  float a[kUnroll] = {0.f, 0.f, 0.f, 0.f};
  const int nvec = aligned16(g) ? n / V : 0;
  const uint4* gv = reinterpret_cast<const uint4*>(g);
  int i = threadIdx.x;
  // unroll 1: the 4 loads per trip are the memory parallelism; unrolling the trips as well
  // only raises register pressure (spills at 3 blocks per SM).
#pragma unroll 1
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

template <NormKind K>
__device__ __forceinline__ double root(double s, float p) {
  if constexpr (K == NormKind::L2) return sqrt(s);
  else if constexpr (K == NormKind::LINF) return s;
  else return pow(s, 1.0 / static_cast<double>(p));
}

// torch: clip_coef = max_norm / (total + 1e-6); clamp(max=1) (NaN stays NaN, so a NaN norm
// poisons the gradients exactly as torch's does unless error_if_nonfinite stops it first).
__device__ __forceinline__ float scale_of(float norm, float max_norm) {
  const float coef = max_norm / (norm + kEps);
  return coef != coef ? coef : fminf(coef, 1.0f);
}

// Sum (max for inf) in float64 of x[j], x[j + stride], ... below `end`, in a fixed order.
// Eight loads are issued before any add: the final reduction is one block walking thousands
// of partials, and with one dependent load per add it was latency-bound (~27 us at 120m, H200
// 2026-11-30). Slots past `end` read as 0, the identity of both sums and maxes of |g| terms.
template <NormKind K>
__device__ __forceinline__ double strided_sum(const float* x, int j, int end, int stride) {
  constexpr int U = 8;
  double s = 0.0;
  for (; j < end; j += U * stride) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = j + u * stride;
      // __ldcg: other blocks wrote these slots in this launch; read them from L2, not L1.
      v[u] = k < end ? __ldcg(x + k) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) s = combine<K>(s, static_cast<double>(v[u]));
  }
  return s;
}

// Total of all partials in float64, fixed order (thread-strided then a fixed tree). Every
// thread of the block gets the result (broadcast through shared memory).
template <NormKind K>
__device__ double total_of(const float* partials, int n_partials, double* shd) {
  double s = strided_sum<K>(partials, threadIdx.x, n_partials, blockDim.x);
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
    double s = strided_sum<K>(partials, offsets[t] + lane, offsets[t + 1], 32);
    s = warp_reduce<K>(s);
    if (lane == 0) per_tensor[t] = static_cast<float>(root<K>(s, p));
  }
}

// The final reduction by one whole block: total, per-tensor norms, flag and scale.
template <NormKind K>
__device__ void final_block(const float* partials, float p, float max_norm, const NormOut& o,
                            double* shd) {
  per_tensor_norms<K>(partials, o.offsets, o.n_tensors, p, o.per_tensor);
  const double s = total_of<K>(partials, o.n_partials, shd);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(root<K>(s, p));
    *o.total = norm;
    *o.nonfinite = !isfinite(norm);
    *o.scale = scale_of(norm, max_norm);
  }
}

// ---- the fused clip: balanced runs of tiles -------------------------------------------------

// Block v of G owns tiles [tile_begin(v), tile_begin(v + 1)) of its launch (P tiles): one
// contiguous run per block, the runs differing by at most one tile. G <= P, so none is empty.
__device__ __forceinline__ int tile_begin(int v, int G, int P) {
  return static_cast<int>(static_cast<int64_t>(v) * P / G);
}

// The block whose run holds tile i: the largest v with tile_begin(v) <= i.
__device__ __forceinline__ int owner_of(int i, int G, int P) {
  return static_cast<int>((static_cast<int64_t>(i + 1) * G - 1) / P);
}

// The tensor (index in the table) holding tile i: the last one with tile_start <= i.
__device__ __forceinline__ int tensor_of(const SpanTable& tt, int i) {
  int lo = 0, hi = tt.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tt.tile_start[mid] <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Calls op(t, e0, e1) for each piece of block v's run: elements [e0, e1) of tensor t, in
// tensor order (Reverse: last piece first). e0 is a multiple of kTile, so a piece is 16-byte
// aligned iff its tensor is.
template <bool Reverse, typename Op>
__device__ __forceinline__ void for_each_span(const SpanTable& tt, int v, int G, Op&& op) {
  const int P = tt.tile_start[tt.n];
  const int lo = tile_begin(v, G, P), hi = tile_begin(v + 1, G, P);
  const int t0 = tensor_of(tt, lo), t1 = tensor_of(tt, hi - 1);
  for (int k = 0; k <= t1 - t0; ++k) {
    const int t = Reverse ? t1 - k : t0 + k;
    const int ts = tt.tile_start[t];
    const int a = (lo > ts ? lo : ts) - ts;
    const int b = (hi < tt.tile_start[t + 1] ? hi : tt.tile_start[t + 1]) - ts;
    const int64_t e1 = static_cast<int64_t>(b) * kTile;
    op(t, static_cast<int64_t>(a) * kTile, e1 < tt.numel[t] ? e1 : tt.numel[t]);
  }
}

// This thread's share of sum |x|^p (max |x| for inf) over n elements, in float64. Each trip
// issues kUnroll independent 16-byte loads per thread before any use (out-of-range ones are
// zeros, the identity of every kind), reduces them in float32 (<= 32 elements) and adds the
// trip into a float64 accumulator: float32 rounding never builds up over a long run.
template <typename T, NormKind K, int L = kLoadCached>
__device__ __forceinline__ double span_sum(const T* __restrict__ g, int64_t n, float p) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  constexpr int64_t W = static_cast<int64_t>(kUnroll) * kThreads;
  static_assert(kUnroll == 4, "the trip's combine tree below assumes 4 loads");
  double s = 0.0;
  const int64_t nvec = aligned16(g) ? n / V : 0;
  const uint4* gv = reinterpret_cast<const uint4*>(g);
  const uint64_t policy = load_policy<L>();
  // unroll 1: the kUnroll loads per trip are the memory parallelism; unrolling trips as well
  // only raises register pressure (40 registers at 3 blocks of 512 per SM).
#pragma unroll 1
  for (int64_t i = threadIdx.x; i < nvec; i += W) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = i + u * kThreads;
      r[u] = k < nvec ? load16<L>(gv + k, policy) : make_uint4(0u, 0u, 0u, 0u);  // loads first
    }
    float a[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* e = reinterpret_cast<const T*>(&r[u]);
      a[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < V; ++k) a[u] = acc<K>(a[u], to_f(e[k]), p);
    }
    const float trip = combine<K>(combine<K>(a[0], a[1]), combine<K>(a[2], a[3]));
    s = combine<K>(s, static_cast<double>(trip));
  }
  // The scalar tail (< V elements at a tensor's end) and unaligned views.
  float a = 0.0f;
  for (int64_t j = nvec * V + threadIdx.x; j < n; j += kThreads) a = acc<K>(a, to_f(g[j]), p);
  return combine<K>(s, static_cast<double>(a));
}

// In place g = g * s over n elements (fp32 math, rounded once), last trip first: the norm pass
// read the end of each run last, so walking backwards starts on lines still in L2 (under the
// cached loads; the evict-first modes leave fewer of them there).
template <typename T>
__device__ __forceinline__ void span_scale(T* __restrict__ g, int64_t n, float s) {
  constexpr int V = 16 / sizeof(T);
  constexpr int64_t W = static_cast<int64_t>(kUnroll) * kThreads;
  const int64_t nvec = aligned16(g) ? n / V : 0;
  for (int64_t j = nvec * V + threadIdx.x; j < n; j += kThreads) g[j] = from_f<T>(to_f(g[j]) * s);
  uint4* gv = reinterpret_cast<uint4*>(g);
#pragma unroll 1
  for (int64_t base = nvec > 0 ? (nvec - 1) / W * W : -1; base >= 0; base -= W) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // all loads first
      const int64_t k = base + u * kThreads + threadIdx.x;
      if (k < nvec) r[u] = gv[k];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = base + u * kThreads + threadIdx.x;
      if (k >= nvec) continue;
      T* e = reinterpret_cast<T*>(&r[u]);
#pragma unroll
      for (int q = 0; q < V; ++q) e[q] = from_f<T>(to_f(e[q]) * s);
      gv[k] = r[u];
    }
  }
}

// The last of a shared tensor's pieces is counted: sum the pieces in block order (a fixed
// order, whichever block does it), in float64, and write the tensor's norm.
template <NormKind K>
__device__ void finish_tensor(const ClipOut& o, const double* segs, int first, int n_seg, int gt,
                              float p, double* shd) {
  __threadfence();  // see the other pieces (each was fenced before it was counted)
  double x = 0.0;
  for (int j = threadIdx.x; j < n_seg; j += blockDim.x) x = combine<K>(x, __ldcg(segs + first + j));
  x = block_reduce<K>(x, shd);
  if (threadIdx.x == 0) {
    o.per_tensor[gt] = static_cast<float>(root<K>(x, p));
    o.seg_count[gt] = 0u;  // every piece is counted: ready for the next call / graph replay
  }
}

// The total over every slot of the clip in slot order (thread-strided, then a fixed tree), and
// what depends on it; empty tensors own no tile, their norm is written here.
template <NormKind K>
__device__ void final_total(const ClipOut& o, float p, float max_norm, double* shd) {
  double s = 0.0;
  for (int i = threadIdx.x; i < o.n_slots; i += blockDim.x) s = combine<K>(s, __ldcg(o.segs + i));
  for (int t = threadIdx.x; t < o.n_tensors; t += blockDim.x)
    if (o.offsets[t + 1] == o.offsets[t]) o.per_tensor[t] = 0.0f;
  s = block_reduce<K>(s, shd);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(root<K>(s, p));
    *o.total = norm;
    *o.nonfinite = !isfinite(norm);
    *o.scale = scale_of(norm, max_norm);
  }
}

// The norm pass of block v (of G) over its run. Every piece (block v's part of tensor t) leaves
// its float64 sum in slot seg_base + v + t: v + t differs for every piece (along the tiles one
// of them, or both, goes up by one at each new piece), and the one slot a run starting on a
// tensor boundary skips is written 0, so the launch's slots [seg_base, seg_base + G + n - 1) are
// all written. A tensor inside the run gets its norm at once; a shared one is finished by the
// block counting its last piece (per-tensor counter). The block counting the last block of the
// clip (over every launch of it) sums all slots in order: total, flag, scale. The run's last
// piece is counted together with the block (two atomics in flight at once): the tail after the
// last load is one fence, one atomic round trip and two short block reductions.
// `flag` is two shared ints.
template <typename T, NormKind K>
__device__ void norm_run(const SpanTable& tt, int v, int G, int seg_base, float p,
                         float max_norm, const ClipOut& o, double* shd, int* flag) {
  const int P = tt.tile_start[tt.n];
  const int lo = tile_begin(v, G, P);
  const int t0 = tensor_of(tt, lo), t1 = tensor_of(tt, tile_begin(v + 1, G, P) - 1);
  if (threadIdx.x == 0 && v > 0 && tt.tile_start[t0] == lo) o.segs[seg_base + v + t0 - 1] = 0.0;
  int last_first = 0, last_n = 1, last_gt = 0;  // the run's last piece, when its tensor is shared
  for_each_span<false>(tt, v, G, [&](int t, int64_t e0, int64_t e1) {
    const T* g = static_cast<const T*>(tt.ptr[t]) + e0;
    const double s = block_reduce<K>(span_sum<T, K>(g, e1 - e0, p), shd);  // thread 0
    const int first = owner_of(tt.tile_start[t], G, P);
    const int n_seg = owner_of(tt.tile_start[t + 1] - 1, G, P) - first + 1;
    const int gt = tt.tensor[t];
    double* segs = o.segs + seg_base + t;  // piece of block b: segs[b]
    if (threadIdx.x == 0) {
      segs[v] = s;
      if (n_seg == 1) o.per_tensor[gt] = static_cast<float>(root<K>(s, p));
    }
    if (n_seg == 1) return;
    if (t == t1) {  // counted below, with the block
      last_first = first, last_n = n_seg, last_gt = gt;
      return;
    }
    if (threadIdx.x == 0) {
      __threadfence();  // publish the piece before counting it (threadFenceReduction)
      flag[0] = atomicAdd(o.seg_count + gt, 1u) == static_cast<unsigned>(n_seg - 1);
    }
    __syncthreads();
    if (flag[0]) finish_tensor<K>(o, segs, first, n_seg, gt, p, shd);  // uniform
  });
  __syncthreads();  // every thread has read flag[0] before it is rewritten
  if (threadIdx.x == 0) {
    __threadfence();  // this block's slots, before it is counted
    const bool shared = last_n > 1;
    const unsigned piece = shared ? atomicAdd(o.seg_count + last_gt, 1u) : 0u;
    const unsigned block = atomicAdd(o.done, 1u);
    flag[0] = shared && piece == static_cast<unsigned>(last_n - 1);
    flag[1] = block == static_cast<unsigned>(o.n_blocks - 1);
  }
  __syncthreads();
  if (flag[0]) finish_tensor<K>(o, o.segs + seg_base + t1, last_first, last_n, last_gt, p, shd);
  if (flag[1]) {
    __threadfence();  // see every block's slots (each block fenced before it was counted)
    final_total<K>(o, p, max_norm, shd);
    if (threadIdx.x == 0) *o.done = 0u;
  }
}

// Which blocks hold pieces of tensor t: the first, and how many (1: t lies inside one run).
__device__ __forceinline__ void piece_owners(const SpanTable& tt, int t, int G, int P, int* first,
                                             int* n) {
  *first = owner_of(tt.tile_start[t], G, P);
  *n = owner_of(tt.tile_start[t + 1] - 1, G, P) - *first + 1;
}

// Pieces parked per warp before the block sums them (see norm_run_parked): one barrier pair per
// kParked pieces instead of per piece. 8 x 16 warps x 8 bytes = 1 KB of shared memory.
constexpr int kParked = 8;

// norm_run with the pieces reduced per warp: each warp folds its share of a piece with shuffles
// alone and parks the result in shared memory, then goes on to the next piece's loads; the
// block sums the parked values (warps in order) every kParked pieces and at the run's end.
// Why: norm_run's block_reduce per piece holds every warp at two barriers until the slowest
// warp's loads return, a bubble of about a memory latency per piece; the runs with the most
// pieces (tensor ends) were read last, 5-6 us after the p90 run (H200 trace, 2026-12-02).
// Only the first and last pieces of a run can be shared with other blocks (a piece between
// them is a whole tensor), so the run's counting is at most two tensor counters and the block
// counter, all at the end. Same slots, same fixed orders: deterministic, but the float64 sums
// are added in another order than norm_run's, so the two variants' bits may differ.
// `flag` is three shared ints, `parked` kParked x kWarps shared doubles.
template <typename T, NormKind K, int L = kLoadCached>
__device__ void norm_run_parked(const SpanTable& tt, int v, int G, int seg_base, float p,
                                float max_norm, const ClipOut& o, double* shd, int* flag,
                                double (*parked)[kWarps]) {
  const int P = tt.tile_start[tt.n];
  const int lo = tile_begin(v, G, P);
  if (threadIdx.x == 0 && v > 0) {
    const int t0 = tensor_of(tt, lo);
    if (tt.tile_start[t0] == lo) o.segs[seg_base + v + t0 - 1] = 0.0;
  }
  int k = 0;  // pieces parked, uniform across the block
  // The parked pieces are tensors t_end - count + 1 .. t_end: sum each over the warps in order.
  auto publish = [&](int t_end, int count) {
    __syncthreads();  // every warp has parked its share
    if (threadIdx.x < count) {
      const int j = threadIdx.x, t = t_end - count + 1 + j;
      double s = parked[j][0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s = combine<K>(s, parked[j][w]);
      o.segs[seg_base + v + t] = s;
      int first, n;
      piece_owners(tt, t, G, P, &first, &n);
      if (n == 1) o.per_tensor[tt.tensor[t]] = static_cast<float>(root<K>(s, p));
    }
    __syncthreads();  // read before a warp parks the next batch
  };
  for_each_span<false>(tt, v, G, [&](int t, int64_t e0, int64_t e1) {
    const T* g = static_cast<const T*>(tt.ptr[t]) + e0;
    const double s = warp_reduce<K>(span_sum<T, K, L>(g, e1 - e0, p));  // lane 0
    if ((threadIdx.x & 31) == 0) parked[k][threadIdx.x >> 5] = s;
    if (++k == kParked) {
      publish(t, k);
      k = 0;
    }
  });
  // t0 and t1 found again here rather than kept: fewer registers live across the loads
  const int t0 = tensor_of(tt, lo), t1 = tensor_of(tt, tile_begin(v + 1, G, P) - 1);
  if (k > 0) publish(t1, k);
  int f0, n0, f1, n1;
  piece_owners(tt, t0, G, P, &f0, &n0);
  piece_owners(tt, t1, G, P, &f1, &n1);
  const bool count0 = n0 > 1, count1 = t1 != t0 && n1 > 1;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's slots, before it is counted (threadFenceReduction)
    const unsigned a = count0 ? atomicAdd(o.seg_count + tt.tensor[t0], 1u) : 0u;
    const unsigned b = count1 ? atomicAdd(o.seg_count + tt.tensor[t1], 1u) : 0u;
    const unsigned block = atomicAdd(o.done, 1u);
    flag[0] = count0 && a == static_cast<unsigned>(n0 - 1);
    flag[1] = count1 && b == static_cast<unsigned>(n1 - 1);
    flag[2] = block == static_cast<unsigned>(o.n_blocks - 1);
  }
  __syncthreads();
  if (flag[0]) finish_tensor<K>(o, o.segs + seg_base + t0, f0, n0, tt.tensor[t0], p, shd);
  if (flag[1]) finish_tensor<K>(o, o.segs + seg_base + t1, f1, n1, tt.tensor[t1], p, shd);
  if (flag[2]) {
    __threadfence();  // see every block's slots (each block fenced before it was counted)
    final_total<K>(o, p, max_norm, shd);
    if (threadIdx.x == 0) *o.done = 0u;
  }
}

// Programmatic dependent launch (sm_90+; no-ops elsewhere and when not launched that way).
__device__ __forceinline__ void let_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace andrea_clip
