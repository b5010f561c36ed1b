// Torch side of the multi-tensor tables, shared by binding.cpp and dev/binding_dev.cpp: input
// checks, the per-shape plan cache (chunk offsets on the device, the completion counter) and
// build_tables, the one loop that turns Depth parallel tensor lists into by-value
// TensorTable<Depth>s. Nothing here waits for the device.
//
// Message arguments are pre-formatted strings (std::to_string, Device::str): on the GPU image
// (torch 2.11, 2026-11-29) streaming an integer through c10::str inside this extension crashed
// in libstdc++'s locale code (SIGSEGV in _M_insert<unsigned long>, seen under cuda-gdb).
#pragma once

#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <torch/extension.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "clip.h"
#include "tensor_table.h"

namespace andrea_clip {

// An input the kernels cannot take (dtype, layout, contiguity) but the pure-torch reference
// can. Registered in each binding as the Python exception <module>.UnsupportedInput (a
// RuntimeError subclass), which andrea_diag/clip/cuda.py catches by type to fall back.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::string idx(size_t i) { return std::to_string(i); }

inline DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    default:
      throw Unsupported(std::string("andrea_clip: gradient dtype must be float32, bfloat16 or "
                                    "float16, got ") + c10::toString(t.scalar_type()));
  }
}

inline NormKind norm_kind(double p) {
  TORCH_CHECK(!std::isnan(p) && p > 0.0, "andrea_clip: norm_type must be > 0 (or inf), got ",
              std::to_string(p));
  if (std::isinf(p)) return NormKind::LINF;
  if (p == 2.0) return NormKind::L2;
  return NormKind::LP;
}

inline void check_grads(const std::vector<at::Tensor>& grads) {
  TORCH_CHECK(!grads.empty(), "andrea_clip: empty gradient list");
  const auto dev = grads[0].device();
  TORCH_CHECK(dev.is_cuda(), "andrea_clip: gradients must be CUDA tensors, got ", dev.str());
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& g = grads[i];
    TORCH_CHECK(g.defined(), "andrea_clip: gradient ", idx(i), " is undefined");
    TORCH_CHECK(g.device() == dev, "andrea_clip: gradient ", idx(i), " is on ", g.device().str(),
                " but gradient 0 is on ", dev.str(), " (all must share one device)");
    if (g.layout() != at::kStrided)
      throw Unsupported("andrea_clip: gradient " + idx(i) + " is not strided (sparse?)");
    if (!g.is_contiguous())
      throw Unsupported("andrea_clip: gradient " + idx(i) + " is not contiguous");
    TORCH_CHECK(g.numel() <= int64_t(INT32_MAX) * kChunk / 2, "andrea_clip: gradient ", idx(i),
                " is too large");
    dtype_of(g);
  }
}

// Per (device, numel list): chunk offsets on the device and the kernels' counter words.
struct Plan {
  std::vector<int32_t> offsets;  // host copy, n_tensors + 1
  at::Tensor offsets_host;       // pinned source of the async copy; kept alive with the plan
  at::Tensor offsets_dev;        // int32 (n_tensors + 1)
  // int32 (4 + n_tensors), zeroed once: [0] the norm pass's count of finished tensors,
  // [1..2] the dev single-launch grid barrier, [4 + t] tensor t's count of finished pieces.
  // The kernels leave them zero, so one clip per list shape may run at a time on a device (a
  // training loop clips one list at a time).
  at::Tensor counters;
  unsigned* done() const { return reinterpret_cast<unsigned*>(counters.data_ptr<int32_t>()); }
  unsigned* seg_count() const { return done() + 4; }
};

// A CUDA graph captured over a plan holds its device pointers (offsets, counters) raw, so a
// plan used under capture is kept for the process: the cap below may then drop it from the
// cache, never free it under a graph (the optimizer-state probe captures its norms this way).
inline void keep_if_captured(const std::shared_ptr<Plan>& plan) {
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None) return;
  static auto& kept = *new std::vector<std::shared_ptr<Plan>>();  // leaked, as `plans` below
  for (const auto& k : kept)
    if (k == plan) return;
  kept.push_back(plan);
}

// Built once per gradient-list shape from pinned memory with a non_blocking copy and cached.
// Call once eagerly before CUDA-graph capture (pinned allocation is not allowed in capture).
inline std::shared_ptr<Plan> get_plan(const std::vector<at::Tensor>& grads) {
  static std::mutex mu;
  // Leaked on purpose: destroying device tensors from a static destructor at process exit
  // runs after the CUDA context is gone and aborts the interpreter ("invalid resource handle").
  static auto& plans = *new std::map<std::pair<int, std::vector<int64_t>>, std::shared_ptr<Plan>>();
  constexpr size_t kMaxPlans = 64;  // distinct gradient-list shapes per process; then start over
  std::vector<int64_t> numels;
  numels.reserve(grads.size());
  for (const auto& g : grads) numels.push_back(g.numel());
  auto key = std::make_pair(static_cast<int>(grads[0].get_device()), std::move(numels));
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) {
    keep_if_captured(it->second);
    return it->second;
  }
  auto plan = std::make_shared<Plan>();
  plan->offsets.resize(key.second.size() + 1);
  int64_t acc = 0;
  for (size_t i = 0; i < key.second.size(); ++i) {
    plan->offsets[i] = static_cast<int32_t>(acc);
    acc += (key.second[i] + kChunk - 1) / kChunk;
    TORCH_CHECK(acc < INT32_MAX, "andrea_clip: too many chunks");
  }
  plan->offsets.back() = static_cast<int32_t>(acc);
  const auto n = static_cast<int64_t>(plan->offsets.size());
  plan->offsets_host = at::empty({n}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  std::memcpy(plan->offsets_host.data_ptr<int32_t>(), plan->offsets.data(), n * sizeof(int32_t));
  // non_blocking from pinned memory: an async copy on the current stream, no host sync.
  plan->offsets_dev = plan->offsets_host.to(grads[0].device(), /*non_blocking=*/true);
  plan->counters =
      at::zeros({4 + n - 1}, at::TensorOptions().dtype(at::kInt).device(grads[0].device()));
  if (plans.size() >= kMaxPlans) plans.clear();
  plans.emplace(std::move(key), plan);
  return plan;
}

// The walk both table builders share: the non-empty gradients in order, each put in the open
// entry of its dtype, a new entry opened when there is none or it holds `capacity` tensors.
// `open_new(dt)` makes an empty entry, `count(entry)` says how many tensors it holds and
// `add(entry, i)` puts tensor i in it. Empty tensors own no chunk and no tile: skipped.
template <typename Entry, typename Open, typename Count, typename Add>
std::vector<Entry> fill_by_dtype(const std::vector<at::Tensor>& grads, int capacity,
                                 Open open_new, Count count, Add add) {
  std::vector<Entry> out;
  int open[3] = {-1, -1, -1};  // index in `out` of the entry being filled, per dtype
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].numel() == 0) continue;
    const DType dt = dtype_of(grads[i]);
    int& o = open[static_cast<int>(dt)];
    if (o < 0 || count(out[o]) == capacity) {
      out.push_back(open_new(dt));
      o = static_cast<int>(out.size()) - 1;
    }
    add(out[o], i);
  }
  return out;
}

// The one table builder. lists[0] are the gradients: they decide dtype, sizes and chunking;
// lists[d][i] (d > 0) is the d-th pointer of tensor i (checked by the caller). One table per
// dtype per <= kMax non-empty tensors (their per-tensor norm comes out 0 from the offsets).
// global_start is the tensor's first slot.
template <int Depth>
std::vector<std::pair<DType, TensorTable<Depth>>> build_tables(
    const std::array<const std::vector<at::Tensor>*, Depth>& lists,
    const std::vector<int32_t>& offsets) {
  using Table = TensorTable<Depth>;
  using Entry = std::pair<DType, Table>;
  const auto& grads = *lists[0];
  return fill_by_dtype<Entry>(
      grads, Table::kMax,
      [](DType dt) {
        Entry e{dt, Table{}};
        e.second.n = 0;
        e.second.local_start[0] = 0;
        return e;
      },
      [](const Entry& e) { return e.second.n; },
      [&](Entry& e, size_t i) {
        Table& tt = e.second;
        const int k = tt.n++;
        for (int d = 0; d < Depth; ++d) tt.ptr[d][k] = (*lists[d])[i].data_ptr();
        tt.numel[k] = grads[i].numel();
        tt.global_start[k] = offsets[i];
        tt.local_start[k + 1] = tt.local_start[k] + (offsets[i + 1] - offsets[i]);
      });
}

// One launch of the fused clip: a by-value table of one dtype, its grid (span_grid) and its
// first slot in the per-piece scratch (the slots of a launch: grid + tt.n - 1).
struct SpanLaunch {
  DType dt;
  SpanTable tt;
  int grid;
  int seg_base;
};

inline void check_cuda(cudaError_t e, const char* what);

// The fused clip's tables: one per dtype per <= SpanTable::kMax non-empty tensors (empty ones
// own no tile and are skipped), each tensor cut into ceil(numel / kTile) tiles.
inline std::vector<SpanLaunch> build_span_tables(const std::vector<at::Tensor>& grads) {
  auto out = fill_by_dtype<SpanLaunch>(
      grads, SpanTable::kMax,
      [](DType dt) {
        SpanLaunch l{dt, SpanTable{}, 0, 0};
        l.tt.n = 0;
        l.tt.tile_start[0] = 0;
        return l;
      },
      [](const SpanLaunch& l) { return l.tt.n; },
      [&](SpanLaunch& l, size_t i) {
        SpanTable& tt = l.tt;
        const int k = tt.n++;
        const int64_t tiles = tt.tile_start[k] + (grads[i].numel() + kTile - 1) / kTile;
        TORCH_CHECK(tiles < INT32_MAX, "andrea_clip: too many elements in one launch");
        tt.ptr[k] = grads[i].data_ptr();
        tt.numel[k] = grads[i].numel();
        tt.tensor[k] = static_cast<int32_t>(i);
        tt.tile_start[k + 1] = static_cast<int32_t>(tiles);
      });
  int64_t base = 0;
  for (auto& l : out) {
    check_cuda(span_grid(l.tt.tile_start[l.tt.n], &l.grid), "span_grid");
    TORCH_CHECK(base + l.grid + l.tt.n < INT32_MAX, "andrea_clip: too many launches");
    l.seg_base = static_cast<int>(base);
    base += l.grid + l.tt.n - 1;  // the slots of a launch (clip_device.cuh: norm_run)
  }
  return out;
}

inline void check_cuda(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "andrea_clip: ", what, " failed: ", cudaGetErrorString(e));
}

}  // namespace andrea_clip
