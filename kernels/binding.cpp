// Torch binding of the fused clipper (kernels/clip.cu). Loaded by andrea_diag/clip/cuda.py with
// torch.utils.cpp_extension.load; every entry point validates its inputs with TORCH_CHECK.
//
// Host-sync policy: nothing here waits for the device. Tensor metadata goes to the kernels by
// value (TensorList); the only device-side metadata, the int32 chunk offsets per tensor, is
// built once per gradient-list shape from pinned memory with a non_blocking copy and cached.
// Call once eagerly before CUDA-graph capture so that cache entry exists (allocating pinned
// memory is not allowed while a stream is being captured).
#include <torch/extension.h>

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "clip.h"

// Message arguments are pre-formatted strings (std::to_string, Device::str): on the GPU image
// (torch 2.11, 2026-11-29) streaming an integer through c10::str inside this extension crashed
// in libstdc++'s locale code (SIGSEGV in _M_insert<unsigned long>, seen under cuda-gdb).

namespace ac = andrea_clip;

namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Per (device, numel list): chunk offsets on the device and the single-launch barrier words.
struct Plan {
  std::vector<int32_t> offsets;  // host copy, n_tensors + 1
  at::Tensor offsets_host;       // pinned source of the async copy; kept alive with the plan
  at::Tensor offsets_dev;        // int32 (n_tensors + 1)
  at::Tensor barrier;            // int32 (2), zeroed once; k_clip_single leaves it zeroed
};

std::mutex g_mu;
// Leaked on purpose: destroying device tensors from a static destructor at process exit runs
// after the CUDA context is gone and aborts the interpreter ("invalid resource handle").
auto& g_plans = *new std::map<std::pair<int, std::vector<int64_t>>, std::shared_ptr<Plan>>();
constexpr size_t kMaxPlans = 64;  // distinct gradient-list shapes per process; then start over

ac::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ac::DType::F32;
    case at::kBFloat16: return ac::DType::BF16;
    case at::kHalf: return ac::DType::F16;
    default: TORCH_CHECK(false, "andrea_clip unsupported: gradient dtype must be float32, bfloat16 or float16, got ", c10::toString(t.scalar_type()));
  }
  return ac::DType::F32;
}

ac::NormKind norm_kind(double p) {
  TORCH_CHECK(!std::isnan(p) && p > 0.0, "andrea_clip: norm_type must be > 0 (or inf), got ", std::to_string(p));
  if (std::isinf(p)) return ac::NormKind::LINF;
  if (p == 2.0) return ac::NormKind::L2;
  return ac::NormKind::LP;
}

void check_grads(const std::vector<at::Tensor>& grads) {
  TORCH_CHECK(!grads.empty(), "andrea_clip: empty gradient list");
  const auto dev = grads[0].device();
  TORCH_CHECK(dev.is_cuda(), "andrea_clip: gradients must be CUDA tensors, got ", dev.str());
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& g = grads[i];
    TORCH_CHECK(g.defined(), "andrea_clip: gradient ", std::to_string(i), " is undefined");
    TORCH_CHECK(g.device() == dev, "andrea_clip: gradient ", std::to_string(i), " is on ", g.device().str(),
                " but gradient 0 is on ", dev.str(), " (all must share one device)");
    TORCH_CHECK(g.layout() == at::kStrided, "andrea_clip unsupported: gradient ", std::to_string(i), " is not strided (sparse?)");
    TORCH_CHECK(g.is_contiguous(), "andrea_clip unsupported: gradient ", std::to_string(i), " is not contiguous");
    TORCH_CHECK(g.numel() <= int64_t(INT32_MAX) * ac::kChunk / 2,
                "andrea_clip: gradient ", std::to_string(i), " is too large");
    dtype_of(g);
  }
}

std::shared_ptr<Plan> get_plan(const std::vector<at::Tensor>& grads) {
  std::vector<int64_t> numels;
  numels.reserve(grads.size());
  for (const auto& g : grads) numels.push_back(g.numel());
  auto key = std::make_pair(static_cast<int>(grads[0].get_device()), std::move(numels));
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  auto plan = std::make_shared<Plan>();
  plan->offsets.resize(key.second.size() + 1);
  int64_t acc = 0;
  for (size_t i = 0; i < key.second.size(); ++i) {
    plan->offsets[i] = static_cast<int32_t>(acc);
    acc += (key.second[i] + ac::kChunk - 1) / ac::kChunk;
    TORCH_CHECK(acc < INT32_MAX, "andrea_clip: too many chunks");
  }
  plan->offsets.back() = static_cast<int32_t>(acc);
  plan->offsets_host = at::empty({static_cast<int64_t>(plan->offsets.size())},
                                 at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  std::memcpy(plan->offsets_host.data_ptr<int32_t>(), plan->offsets.data(),
              plan->offsets.size() * sizeof(int32_t));
  // non_blocking from pinned memory: an async copy on the current stream, no host sync.
  plan->offsets_dev = plan->offsets_host.to(grads[0].device(), /*non_blocking=*/true);
  plan->barrier = at::zeros({2}, at::TensorOptions().dtype(at::kInt).device(grads[0].device()));
  if (g_plans.size() >= kMaxPlans) g_plans.clear();
  g_plans.emplace(std::move(key), plan);
  return plan;
}

// Split the list into by-value TensorLists: one dtype per launch, <= kMaxTensors each, empty
// tensors skipped (they own no chunk; their per-tensor norm comes out 0 from the offsets).
std::vector<std::pair<ac::DType, ac::TensorList>> make_lists(const std::vector<at::Tensor>& grads,
                                                             const Plan& plan) {
  std::vector<std::pair<ac::DType, ac::TensorList>> out;
  int open[3] = {-1, -1, -1};  // index in `out` of the list being filled, per dtype
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& g = grads[i];
    if (g.numel() == 0) continue;
    const ac::DType dt = dtype_of(g);
    int& o = open[static_cast<int>(dt)];
    if (o < 0 || out[o].second.n == ac::kMaxTensors) {
      out.emplace_back(dt, ac::TensorList{});
      o = static_cast<int>(out.size()) - 1;
      out[o].second.n = 0;
      out[o].second.local_start[0] = 0;
    }
    ac::TensorList& tl = out[o].second;
    const int k = tl.n++;
    tl.ptr[k] = g.data_ptr();
    tl.numel[k] = g.numel();
    tl.global_start[k] = plan.offsets[i];
    tl.local_start[k + 1] = tl.local_start[k] + (plan.offsets[i + 1] - plan.offsets[i]);
  }
  return out;
}

void check_cuda(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "andrea_clip: ", what, " failed: ", cudaGetErrorString(e));
}

Outputs new_outputs(const at::Tensor& like, int64_t n_tensors) {
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(like.device());
  return {at::empty({}, f32), at::empty({n_tensors}, f32), at::empty({}, f32),
          at::empty({}, f32.dtype(at::kBool))};
}

void check_outputs(const Outputs& o, const at::Tensor& partials, int64_t n_tensors) {
  const auto& [total, per, scale, nonfinite] = o;
  for (const at::Tensor* t : {&total, &per, &scale}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->device() == partials.device(),
                "andrea_clip: outputs must be contiguous float32 on the partials' device");
  }
  TORCH_CHECK(nonfinite.scalar_type() == at::kBool && nonfinite.device() == partials.device(),
              "andrea_clip: nonfinite must be bool on the partials' device");
  TORCH_CHECK(per.numel() == n_tensors, "andrea_clip: per_tensor has ", std::to_string(per.numel()), " slots for ",
              std::to_string(n_tensors), " tensors");
}

// ---- entry points ----------------------------------------------------------------------

at::Tensor chunk_offsets(const std::vector<at::Tensor>& grads) {
  check_grads(grads);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  return get_plan(grads)->offsets_dev;
}

at::Tensor norm_partial(const std::vector<at::Tensor>& grads, double norm_type) {
  check_grads(grads);
  const auto nk = norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = get_plan(grads);
  const int64_t n = plan->offsets.back();
  auto partials = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(grads[0].device()));
  auto stream = c10::cuda::getCurrentCUDAStream();
  for (const auto& [dt, tl] : make_lists(grads, *plan))
    check_cuda(ac::launch_norm_partial(tl, dt, nk, static_cast<float>(norm_type),
                                       partials.data_ptr<float>(), stream),
               "k_grad_norm_partial launch");
  return partials;
}

Outputs norm_final(const at::Tensor& partials, const at::Tensor& offsets, double max_norm,
                   double norm_type) {
  TORCH_CHECK(partials.is_cuda() && partials.scalar_type() == at::kFloat && partials.is_contiguous() &&
                  partials.dim() == 1,
              "andrea_clip: partials must be a contiguous 1-D float32 CUDA tensor");
  TORCH_CHECK(offsets.device() == partials.device() && offsets.scalar_type() == at::kInt &&
                  offsets.is_contiguous() && offsets.dim() == 1 && offsets.numel() >= 1,
              "andrea_clip: offsets must be a contiguous 1-D int32 tensor on the partials' device");
  TORCH_CHECK(!std::isnan(max_norm), "andrea_clip: max_norm is NaN");
  const auto nk = norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(partials.device());
  const int64_t n_tensors = offsets.numel() - 1;
  auto out = new_outputs(partials, n_tensors);
  check_outputs(out, partials, n_tensors);
  auto& [total, per, scale, nonfinite] = out;
  check_cuda(ac::launch_norm_final(partials.data_ptr<float>(), static_cast<int>(partials.numel()),
                                   offsets.data_ptr<int32_t>(), static_cast<int>(n_tensors), nk,
                                   static_cast<float>(norm_type), static_cast<float>(max_norm),
                                   total.data_ptr<float>(), per.data_ptr<float>(),
                                   scale.data_ptr<float>(), nonfinite.data_ptr<bool>(),
                                   c10::cuda::getCurrentCUDAStream()),
             "k_grad_norm_final launch");
  return out;
}

void scale_(const std::vector<at::Tensor>& grads, const at::Tensor& scale) {
  check_grads(grads);
  TORCH_CHECK(scale.device() == grads[0].device() && scale.scalar_type() == at::kFloat &&
                  scale.numel() == 1,
              "andrea_clip: scale must be a one-element float32 tensor on the gradients' device");
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = get_plan(grads);
  auto stream = c10::cuda::getCurrentCUDAStream();
  for (const auto& [dt, tl] : make_lists(grads, *plan))
    check_cuda(ac::launch_scale(tl, dt, scale.data_ptr<float>(), stream), "k_grad_scale launch");
}

// The three-kernel pipeline: partial (1+ launches) -> final (1) -> scale (1+ launches).
Outputs clip(const std::vector<at::Tensor>& grads, double max_norm, double norm_type, bool apply) {
  check_grads(grads);
  TORCH_CHECK(!std::isnan(max_norm), "andrea_clip: max_norm is NaN");
  const auto nk = norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = get_plan(grads);
  const int64_t n_partials = plan->offsets.back();
  const auto dev = grads[0].device();
  auto partials = at::empty({n_partials}, at::TensorOptions().dtype(at::kFloat).device(dev));
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto lists = make_lists(grads, *plan);
  // Launch the long read pass first: the host work below then overlaps it.
  for (const auto& [dt, tl] : lists)
    check_cuda(ac::launch_norm_partial(tl, dt, nk, static_cast<float>(norm_type),
                                       partials.data_ptr<float>(), stream),
               "k_grad_norm_partial launch");
  auto out = new_outputs(grads[0], static_cast<int64_t>(grads.size()));
  auto& [total, per, scale, nonfinite] = out;
  check_cuda(ac::launch_norm_final(partials.data_ptr<float>(), static_cast<int>(n_partials),
                                   plan->offsets_dev.data_ptr<int32_t>(),
                                   static_cast<int>(grads.size()), nk, static_cast<float>(norm_type),
                                   static_cast<float>(max_norm), total.data_ptr<float>(),
                                   per.data_ptr<float>(), scale.data_ptr<float>(),
                                   nonfinite.data_ptr<bool>(), stream),
             "k_grad_norm_final launch");
  if (apply)
    for (const auto& [dt, tl] : lists)
      check_cuda(ac::launch_scale(tl, dt, scale.data_ptr<float>(), stream), "k_grad_scale launch");
  return out;
}

bool single_supported(const std::vector<at::Tensor>& grads) {
  check_grads(grads);
  auto plan = get_plan(grads);
  return make_lists(grads, *plan).size() <= 1;
}

// One cooperative launch for all three stages (benchmark variant; see kernels/README.md).
Outputs clip_single(const std::vector<at::Tensor>& grads, double max_norm, double norm_type,
                    bool apply) {
  check_grads(grads);
  TORCH_CHECK(!std::isnan(max_norm), "andrea_clip: max_norm is NaN");
  const auto nk = norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = get_plan(grads);
  const auto lists = make_lists(grads, *plan);
  TORCH_CHECK(lists.size() == 1, "andrea_clip: the single-launch variant needs one dtype and at most ",
              std::to_string(ac::kMaxTensors), " non-empty tensors; got ", std::to_string(lists.size()), " launches' worth");
  const int64_t n_partials = plan->offsets.back();
  const auto dev = grads[0].device();
  auto partials = at::empty({n_partials}, at::TensorOptions().dtype(at::kFloat).device(dev));
  auto out = new_outputs(grads[0], static_cast<int64_t>(grads.size()));
  auto& [total, per, scale, nonfinite] = out;
  const auto& [dt, tl] = lists[0];
  check_cuda(ac::launch_clip_single(tl, dt, nk, static_cast<float>(norm_type),
                                    static_cast<float>(max_norm), apply, partials.data_ptr<float>(),
                                    static_cast<int>(n_partials), plan->offsets_dev.data_ptr<int32_t>(),
                                    static_cast<int>(grads.size()), total.data_ptr<float>(),
                                    per.data_ptr<float>(), scale.data_ptr<float>(),
                                    nonfinite.data_ptr<bool>(),
                                    reinterpret_cast<unsigned*>(plan->barrier.data_ptr<int32_t>()),
                                    c10::cuda::getCurrentCUDAStream()),
             "k_clip_single launch");
  return out;
}

// ---- AdamW with the clip folded in ---------------------------------------------------------

void check_same(const at::Tensor& t, const at::Tensor& g, const char* what, size_t i) {
  TORCH_CHECK(t.defined(), "andrea_clip: ", what, " ", std::to_string(i), " is undefined");
  TORCH_CHECK(t.device() == g.device(), "andrea_clip: ", what, " ", std::to_string(i), " is on ",
              t.device().str(), " but its gradient is on ", g.device().str());
  TORCH_CHECK(t.scalar_type() == at::kFloat,
              "andrea_clip unsupported: ", what, " ", std::to_string(i), " must be float32");
  TORCH_CHECK(t.layout() == at::kStrided && t.is_contiguous(),
              "andrea_clip unsupported: ", what, " ", std::to_string(i), " is not contiguous");
  TORCH_CHECK(t.numel() == g.numel(), "andrea_clip: ", what, " ", std::to_string(i), " has ",
              std::to_string(t.numel()), " elements but its gradient has ", std::to_string(g.numel()));
}

void check_scalar(const at::Tensor& t, const at::Device& dev, at::ScalarType st, const char* what) {
  TORCH_CHECK(t.defined() && t.device() == dev && t.scalar_type() == st && t.numel() == 1,
              "andrea_clip: ", what, " must be a one-element ", c10::toString(st), " tensor on ",
              dev.str());
}

// One AdamW step with g' = g * scale, skipped entirely when nonfinite (both read on the
// device). steps[i] (fp32, one per parameter, torch AdamW's state["step"]) are incremented
// first unless nonfinite. Gradients are read, never written.
void adamw_clipped(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                   const std::vector<at::Tensor>& exp_avgs,
                   const std::vector<at::Tensor>& exp_avg_sqs, const std::vector<at::Tensor>& steps,
                   const at::Tensor& scale, const at::Tensor& nonfinite, double lr, double beta1,
                   double beta2, double eps, double weight_decay) {
  check_grads(grads);
  const size_t n = grads.size();
  TORCH_CHECK(params.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n &&
                  steps.size() == n,
              "andrea_clip: params, grads, exp_avgs, exp_avg_sqs and steps need one entry each (got ",
              std::to_string(params.size()), ", ", std::to_string(n), ", ",
              std::to_string(exp_avgs.size()), ", ", std::to_string(exp_avg_sqs.size()), ", ",
              std::to_string(steps.size()), ")");
  const auto dev = grads[0].device();
  for (size_t i = 0; i < n; ++i) {
    check_same(params[i], grads[i], "param", i);
    check_same(exp_avgs[i], grads[i], "exp_avg", i);
    check_same(exp_avg_sqs[i], grads[i], "exp_avg_sq", i);
    check_scalar(steps[i], dev, at::kFloat, "step");
  }
  check_scalar(scale, dev, at::kFloat, "scale");
  check_scalar(nonfinite, dev, at::kBool, "nonfinite");
  TORCH_CHECK(std::isfinite(lr) && lr >= 0.0, "andrea_clip: lr must be finite and >= 0, got ", std::to_string(lr));
  TORCH_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
              "andrea_clip: betas must be in [0, 1), got ", std::to_string(beta1), ", ", std::to_string(beta2));
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, "andrea_clip: eps must be finite and >= 0, got ", std::to_string(eps));
  TORCH_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0,
              "andrea_clip: weight_decay must be finite and >= 0, got ", std::to_string(weight_decay));
  const c10::cuda::CUDAGuard guard(dev);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const bool* nf = nonfinite.data_ptr<bool>();

  // Step counters first (every parameter with a gradient, empty ones too, as torch does).
  ac::StepList sl{};
  for (size_t i = 0; i < n; ++i) {
    sl.step[sl.n++] = steps[i].data_ptr<float>();
    if (sl.n == ac::kMaxStepTensors || i + 1 == n) {
      check_cuda(ac::launch_step_inc(sl, nf, stream), "k_step_inc launch");
      sl.n = 0;
    }
  }

  // Then the update: by-value tables of <= kMaxAdamTensors non-empty tensors of one grad dtype.
  const ac::AdamHyper h{static_cast<float>(lr), static_cast<float>(beta1),
                        static_cast<float>(beta2), static_cast<float>(eps),
                        static_cast<float>(weight_decay)};
  std::vector<std::pair<ac::DType, ac::AdamList>> lists;
  int open[3] = {-1, -1, -1};
  for (size_t i = 0; i < n; ++i) {
    const auto& g = grads[i];
    if (g.numel() == 0) continue;
    const ac::DType dt = dtype_of(g);
    int& o = open[static_cast<int>(dt)];
    if (o < 0 || lists[o].second.n == ac::kMaxAdamTensors) {
      lists.emplace_back(dt, ac::AdamList{});
      o = static_cast<int>(lists.size()) - 1;
      lists[o].second.n = 0;
      lists[o].second.local_start[0] = 0;
    }
    ac::AdamList& al = lists[o].second;
    const int k = al.n++;
    al.g[k] = g.data_ptr();
    al.p[k] = params[i].data_ptr<float>();
    al.m[k] = exp_avgs[i].data_ptr<float>();
    al.v[k] = exp_avg_sqs[i].data_ptr<float>();
    al.step[k] = steps[i].data_ptr<float>();
    al.numel[k] = g.numel();
    const int64_t chunks = (g.numel() + ac::kChunk - 1) / ac::kChunk;
    TORCH_CHECK(al.local_start[k] + chunks < INT32_MAX, "andrea_clip: too many chunks");
    al.local_start[k + 1] = al.local_start[k] + static_cast<int32_t>(chunks);
  }
  for (const auto& [dt, al] : lists)
    check_cuda(ac::launch_adamw_clipped(al, dt, h, scale.data_ptr<float>(), nf, stream),
               "k_adamw_clipped launch");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "andrea-diag fused gradient clipper (kernels/clip.cu)";
  m.attr("CHUNK") = ac::kChunk;
  m.attr("MAX_TENSORS_PER_LAUNCH") = ac::kMaxTensors;
  m.def("clip", &clip, "Three-kernel clip: returns (total_norm, per_tensor_norm, scale, nonfinite)",
        py::arg("grads"), py::arg("max_norm"), py::arg("norm_type"), py::arg("apply"));
  m.def("clip_single", &clip_single, "Single cooperative launch, same outputs as clip",
        py::arg("grads"), py::arg("max_norm"), py::arg("norm_type"), py::arg("apply"));
  m.def("single_supported", &single_supported, "Whether clip_single can take this list");
  m.def("norm_partial", &norm_partial, "Stage 1 alone: per-chunk partials (float32)");
  m.def("norm_final", &norm_final, "Stage 2 alone: (total, per_tensor, scale, nonfinite)");
  m.def("scale_", &scale_, "Stage 3 alone: in-place g *= scale (skipped when scale == 1)");
  m.def("chunk_offsets", &chunk_offsets, "Cached int32 chunk offsets per tensor (device)");
  m.def("adamw_clipped", &adamw_clipped,
        "AdamW step with g * scale folded in; skipped on device when nonfinite (k_adamw_clipped)",
        py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
        py::arg("steps"), py::arg("scale"), py::arg("nonfinite"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"));
  m.attr("MAX_ADAM_TENSORS_PER_LAUNCH") = ac::kMaxAdamTensors;
}
