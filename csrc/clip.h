// Host-side interface of the production clipper (csrc/clip.cu). No torch headers here:
// CI compile-checks clip.cu with `nvcc -arch=sm_90 -c csrc/clip.cu` in seconds, and
// binding.cpp (the torch side) includes this header to launch the kernels. The layout
// contract with andrea_diag/clip/reference.py is stated in tensor_table.h.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "tensor_table.h"

namespace andrea_clip {

using GradTable = TensorTable<1>;         // the gradients of one launch (one dtype)
constexpr int kMaxTensors = GradTable::kMax;  // 160 per launch

// Blocks per SM of the fused clip's kernels, fixed (not queried): the grid decides how the
// gradients are split into per-block runs and so the order of the float64 sums. A fixed number
// keeps the bits the same for the production pair and the single-launch experiment, and from
// run to run. __launch_bounds__(kThreads, 3) caps registers at 40, so 3 blocks always fit.
constexpr int kNormBlocksPerSm = 3;

// The fused clip's grid for a launch of n_tiles tiles: SMs x kNormBlocksPerSm, never more
// blocks than tiles. The SM count is cached per device (no sync, capture-safe).
inline cudaError_t span_grid(int n_tiles, int* grid) {
  static thread_local int cached_dev = -1, cached_sms = 0;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev != cached_dev) {
    e = cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    cached_dev = dev;
  }
  const int full = cached_sms * kNormBlocksPerSm;
  *grid = n_tiles < full ? n_tiles : full;
  if (*grid < 1) *grid = 1;
  return cudaSuccess;
}

// ---- the fused clip (clip()): norm pass, then the scale pass ----------------------------

// Where the fused norm pass writes (device pointers). Passed by value.
struct ClipOut {
  const int32_t* offsets;  // n_tensors + 1 chunk offsets (device): tensor t is empty iff equal
  int n_tensors;           // in the whole list
  int n_blocks;            // over every launch of this clip (what *done counts up to)
  int n_slots;             // over every launch: sum of (grid + tensors - 1)
  double* segs;            // n_slots scratch: one float64 sum per (block, tensor) piece
  unsigned* seg_count;     // n_tensors counters (pieces done), 0 between calls
  unsigned* done;          // blocks done over every launch, 0 between calls
  float* total;
  float* per_tensor;
  float* scale;
  bool* nonfinite;
};

// The norm pass over one table: block b of `grid` reads its own contiguous, balanced run of
// tiles with 16-byte loads and leaves one float64 sum per tensor piece; a tensor split over
// several blocks is finished by the last of them (a per-tensor counter), and the last block of
// the clip (over every launch of it) sums the pieces: total, flag and scale. One pass, no
// second kernel. seg_base: first `segs` slot of this launch (the previous launches' grid + n - 1
// summed).
cudaError_t launch_clip_norm(const SpanTable& tt, DType dt, NormKind nk, float p, float max_norm,
                             const ClipOut& out, int seg_base, int grid, cudaStream_t stream);

// A clip whose tensors are all empty: the final values alone (norm 0, scale 1), one block.
cudaError_t launch_clip_empty(NormKind nk, float p, float max_norm, const ClipOut& out,
                              cudaStream_t stream);

// In place g *= *scale over one table, every block returning at once when *scale == 1. Each
// block walks the same run as in the norm pass (same grid) backwards, so it starts on what the
// norm pass read last, still in L2. after_norm: launched right behind the norm pass, with
// programmatic dependent launch (sm_90+) when enabled, so its launch overlaps the norm pass.
cudaError_t launch_clip_scale(const SpanTable& tt, DType dt, const float* scale, int grid,
                              bool after_norm, cudaStream_t stream);

// Programmatic dependent launch of the scale pass: on by default where the GPU has it (sm_90+);
// ANDREA_CLIP_PDL=0 in the environment or set_pdl(false) turns it off (benchmarks compare both).
// Returns the previous setting.
bool set_pdl(bool enabled);
bool pdl_enabled();

// The norm pass's pieces (a run's part of one tensor) reduced per warp and summed by the block
// every few pieces (default), or one block reduction per piece (false): the benchmarks time
// both. The two may differ in the last bits of the float64 sums. Returns the previous setting.
bool set_parked_pieces(bool enabled);

// How the norm pass loads the gradients: through the read-only path with the default L2 policy
// (kLoadCached), with an L2 evict-first policy (kLoadEvictFirst), or with the streaming cache
// operator (kLoadStream). Same bits in every mode; the benchmarks time them side by side.
// Parked pieces only (the block-pieces kernel keeps kLoadCached). Returns the previous mode, or
// -1 (nothing changed) for a mode outside these three.
constexpr int kLoadCached = 0, kLoadEvictFirst = 1, kLoadStream = 2;
int set_norm_load(int mode);

// ---- the stages alone (norm_partial / norm_final: the reference's three stages) ----------

// Where the stand-alone final reduction writes (device pointers) and what it reads.
struct NormOut {
  const int32_t* offsets;  // n_tensors + 1 chunk offsets (device)
  int n_tensors;
  int n_partials;  // == offsets[n_tensors]
  float* total;
  float* per_tensor;
  float* scale;
  bool* nonfinite;
};

// Per-chunk partials (reference.grad_norm_partial's layout): a persistent grid, grid-stride
// over the chunks, one float32 partial per chunk into its fixed slot.
cudaError_t launch_norm(const GradTable& tt, DType dt, NormKind nk, float p, float* partials,
                        cudaStream_t stream);

// The final reduction alone (one block; deterministic: fixed-order float64 sums, no atomics).
cudaError_t launch_norm_final(const float* partials, NormKind nk, float p, float max_norm,
                              const NormOut& out, cudaStream_t stream);

// dst[i] = src[i] for every tensor of the table (ptr[0]: src, ptr[1]: dst, one dtype) where
// *flag on the device; else it returns at once (a launch, no pass over the tensors).
cudaError_t launch_copy_if(const TensorTable<2>& tt, DType dt, const bool* flag,
                           cudaStream_t stream);

// The pipelined update's spike flag (andrea_diag/probes/spike_bound.py), one warp:
// *flag = grad_norm or mean(signal[0..n)) is non-finite or not at or below its bound. The
// bounds are kernel arguments, so the host sends nothing to the device; n >= 1.
cudaError_t launch_spike_flag(const float* grad_norm, const void* signal, DType dt, int n,
                              float grad_max, float signal_max, bool* flag, cudaStream_t stream);

// The pipelined step's skip flag (andrea_diag/train/measure.py), one thread: *out = 1.0f where
// *nonfinite, the loss is non-finite or *skip (skip may be null), else 0.0f.
cudaError_t launch_skip_flag(const bool* nonfinite, const void* loss, DType dt, const bool* skip,
                             float* out, cudaStream_t stream);

}  // namespace andrea_clip
