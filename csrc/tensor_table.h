// The by-value tensor table and the constants every kernel and both bindings share.
// Host-safe (no device code, no torch): binding.cpp, dev/binding_dev.cpp and the .cu files
// all include it.
//
// Layout contract shared with andrea_diag/clip/reference.py (keep in sync):
//   * every tensor is cut into chunks of kChunk elements; chunk j of tensor t is work item
//     offsets[t] + j, and partials[offsets[t] + j] holds its sum of |g|^p (max |g| for p = inf);
//   * offsets is the exclusive prefix sum of ceil(numel / kChunk), length n_tensors + 1;
//   * scale = min(1, max_norm / (norm + kEps)), computed in float32 like torch (NaN propagates).

#pragma once

#include <cstdint>

namespace andrea_clip {

constexpr int kChunk = 16384;  // elements per work item; == reference.CHUNK (see README)
constexpr int kThreads = 512;  // threads per block; 32 fp32 elements per thread per chunk
constexpr int kWarps = kThreads / 32;
constexpr float kEps = 1e-6f;  // == reference.EPS == torch's clip_grad_norm_ epsilon

enum class DType : int { F32 = 0, BF16 = 1, F16 = 2 };
enum class NormKind : int { L2 = 0, LINF = 1, LP = 2 };

// apex multi_tensor_apply style: Depth parallel lists (grads; or grads, params, m, v, step)
// passed to the kernel BY VALUE, so building it needs no H2D copy and no host sync, and a CUDA
// graph captures it in the kernel node. Capacity keeps it under the 4 KB classic parameter
// limit with room for the other arguments: Depth 1 -> 160 tensors (3848 bytes), 5 -> 68.
// Longer lists (or several dtypes) become several launches (tables.h: build_tables).
template <int Depth>
struct TensorTable {
  static constexpr int kMax = 3840 / (8 * Depth + 16);
  void* ptr[Depth][kMax];
  int64_t numel[kMax];
  int32_t local_start[kMax + 1];  // prefix of chunk counts inside this launch
  int32_t global_start[kMax];     // slot of the tensor's first chunk in `partials`
  int32_t n;                      // tensors in this launch (all non-empty)
};
static_assert(sizeof(TensorTable<1>) <= 3900, "TensorTable<1> must stay under 4 KB");
static_assert(TensorTable<1>::kMax == 160, "MAX_TENSORS_PER_LAUNCH is documented as 160");

// The fused clip's balance unit (elements). Each block of a launch owns one contiguous run of
// tiles (tile_begin in clip_device.cuh), so blocks differ by at most one tile of work. A multiple
// of 8 elements: a block's piece of a tensor starts 16-byte aligned for every dtype whenever the
// tensor does.
constexpr int kTile = 256;

// By-value table of the fused clip's kernels (norm pass and scale pass): the same size as
// TensorTable<1>, with tile counts instead of chunk counts and each tensor's index in the
// caller's list (where its per-tensor norm and its counter live).
struct SpanTable {
  static constexpr int kMax = TensorTable<1>::kMax;
  void* ptr[kMax];
  int64_t numel[kMax];
  int32_t tile_start[kMax + 1];  // prefix of ceil(numel / kTile) inside this launch
  int32_t tensor[kMax];          // index in the gradient list
  int32_t n;                     // tensors in this launch (all non-empty)
};
static_assert(sizeof(SpanTable) <= 3900, "SpanTable must stay under 4 KB with the other args");

}  // namespace andrea_clip
