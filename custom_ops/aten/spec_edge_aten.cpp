// torch.ops.spec_edge: the ops defined from their schemas (spec_edge/op_schemas.h), and their
// kernels, registered per dispatch key: for CPU tensors over the core and, in a build with
// SPEC_EDGE_BUILD_CUDA, for CUDA tensors over custom_ops/cuda. One argument plumbing, a template
// over the backend; every value check and all math live in the core.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "spec_edge/attention.h"
#include "spec_edge/dispatch.h"
#include "spec_edge/op_schemas.h"
#include "spec_edge/ops.h"
#if defined(SPEC_EDGE_WITH_CUDA)
#include "spec_edge/cuda_ops.h"
#endif

namespace {

using spec_edge::Code;
using spec_edge::Status;

void raise_if_error(const Status& s) {
  if (s.is_ok()) return;
  if (s.code() == Code::kInvalidDType) TORCH_CHECK_TYPE(false, s.message());
  if (s.code() == Code::kDeviceError) TORCH_CHECK(false, s.message());
  TORCH_CHECK_VALUE(false, s.message());
}

// Where an op runs: the device of its first score tensor. CPU tensors run the core, CUDA tensors
// the CUDA build. The other score tensors and the outputs must be on that device; the small
// inputs (tokens, parameters, uniforms) may also be on the CPU: they are read on the host.
class Placement {
 public:
  Placement(const at::Tensor& scores, const char* name)
      : device_(checked_device(scores, name)), name_(name), guard_(device_) {}
  bool cuda() const { return device_.is_cuda(); }
  at::TensorOptions options(at::ScalarType dtype) const {
    return at::TensorOptions().dtype(dtype).device(device_);
  }
  // A score or output tensor.
  void check(const at::Tensor& t, const char* name) const {
    TORCH_CHECK_VALUE(t.device() == device_, name, ": expected a tensor on ", device_, " (as ",
                      name_, "), got one on ", t.device());
  }
  // A small input, as a CPU tensor.
  at::Tensor host(const at::Tensor& t, const char* name) const {
    if (t.device().is_cpu()) return t;
    TORCH_CHECK_VALUE(t.device() == device_, name, ": expected a tensor on the CPU or on ", device_,
                      " (as ", name_, "), got one on ", t.device());
    return t.cpu();
  }
  // The current stream of the device (a cudaStream_t).
  void* stream() const {
    return c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_).native_handle();
  }

 private:
  static at::Device checked_device(const at::Tensor& t, const char* name) {
#if defined(SPEC_EDGE_WITH_CUDA)
    TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), name,
                      ": expected a CPU or CUDA tensor, got one on ", t.device());
#else
    TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor, got one on ", t.device(),
                      " (this build of spec_edge has no CUDA kernels: build it with "
                      "SPEC_EDGE_BUILD_CUDA=ON)");
#endif
    return t.device();
  }
  at::Device device_;
  const char* name_;
  c10::DeviceGuard guard_;
};

// The sampling ops of one device, as the kernels call them: Backend::op(where, args...).
#define SPEC_EDGE_SAMPLING_OPS(X) X(verify_greedy) X(accept) X(verify) X(sample) X(filter_logits)

#define CPU_CALL(op) \
  template <class... Args> \
  static Status op(const Placement&, const Args&... args) { return spec_edge::op(args...); }
struct CpuBackend {
  SPEC_EDGE_SAMPLING_OPS(CPU_CALL)
};
#undef CPU_CALL

#if defined(SPEC_EDGE_WITH_CUDA)
// The CUDA build's ops, on the current stream of the placement's device.
#define CUDA_CALL(op)                                                        \
  template <class... Args>                                                   \
  static Status op(const Placement& where, const Args&... args) {           \
    return spec_edge::cuda::op(args..., where.stream());                     \
  }
struct CudaBackend {
  SPEC_EDGE_SAMPLING_OPS(CUDA_CALL)
};
#undef CUDA_CALL
#endif

void check_cpu(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor, got one on ", t.device());
}

spec_edge::DType score_dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return spec_edge::DType::kFloat32;
    case at::kHalf: return spec_edge::DType::kFloat16;
    case at::kBFloat16: return spec_edge::DType::kBFloat16;
    default:
      TORCH_CHECK_TYPE(false, name, ": unsupported dtype ", t.scalar_type(),
                       "; expected float32, float16 or bfloat16");
  }
}

// A [B, R, V] score tensor as a core view; on the CPU the vocab axis is made contiguous if it is
// not (a CUDA tensor must have it contiguous: no hidden copy of a server's batch).
spec_edge::Rows rows_view(at::Tensor& t, const char* name, const Placement& where) {
  where.check(t, name);
  TORCH_CHECK_VALUE(t.dim() == 3, name, ": expected rank 3 [B, rows, V], got shape ", t.sizes());
  const spec_edge::DType dtype = score_dtype(t, name);
  if (t.size(2) > 1 && t.stride(2) != 1) {
    TORCH_CHECK_VALUE(!where.cuda(), name, ": expected a contiguous vocabulary axis (stride 1) on ",
                      "CUDA, got strides ", t.strides(), "; call .contiguous()");
    t = t.contiguous();
  }
  spec_edge::Rows r;
  r.data = t.data_ptr();
  r.dtype = dtype;
  r.batch = t.size(0);
  r.rows = t.size(1);
  r.vocab = t.size(2);
  r.batch_stride = t.stride(0);
  r.row_stride = t.stride(1);
  return r;
}

// A [B, K] token tensor as int64, read on the host.
spec_edge::Tokens tokens_view(at::Tensor& t, const char* name, const Placement& where) {
  t = where.host(t, name);
  TORCH_CHECK_TYPE(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, name,
                   ": unsupported dtype ", t.scalar_type(), "; expected int64 or int32");
  TORCH_CHECK_VALUE(t.dim() == 2, name, ": expected rank 2 [B, K], got shape ", t.sizes());
  if (t.scalar_type() != at::kLong) t = t.to(at::kLong);
  spec_edge::Tokens v;
  v.data = t.data_ptr<int64_t>();
  v.batch = t.size(0);
  v.len = t.size(1);
  v.batch_stride = t.stride(0);
  v.stride = t.stride(1);
  return v;
}

// Ops take [K+1, V] (one sequence) or [B, K+1, V]; returns the batched view of `t`.
at::Tensor batched(const at::Tensor& t, bool single, int64_t single_rank, const char* name,
                   const char* layout) {
  TORCH_CHECK_VALUE(t.dim() == single_rank + (single ? 0 : 1), name, ": expected shape ", layout,
                    (single ? " without" : " with"), " the batch axis (as the target), got shape ",
                    t.sizes());
  return single ? t.unsqueeze(0) : t;
}

bool is_single(const at::Tensor& target, const char* name) {
  TORCH_CHECK_VALUE(target.dim() == 2 || target.dim() == 3, name,
                    ": expected shape [K+1, V] or [B, K+1, V], got ", target.sizes());
  return target.dim() == 2;
}

void prepare_outputs(at::Tensor& a, at::Tensor& b, bool single, int64_t batch, const Placement& where) {
  std::vector<int64_t> shape;
  if (!single) shape.push_back(batch);
  for (at::Tensor* o : {&a, &b}) {
    TORCH_CHECK_TYPE(o->scalar_type() == at::kLong, "out tensors must be int64, got ",
                     o->scalar_type());
    where.check(*o, "out");
    at::native::resize_output(*o, shape);
    TORCH_CHECK_VALUE(o->is_contiguous(), "out tensors must be contiguous");
  }
}

template <class Backend>
std::tuple<at::Tensor&, at::Tensor&> verify_greedy_out(const at::Tensor& target_probs,
                                                       const at::Tensor& draft_tokens,
                                                       at::Tensor& n_accepted,
                                                       at::Tensor& next_token) {
  const bool single = is_single(target_probs, "target_probs");
  at::Tensor target = single ? target_probs.unsqueeze(0) : target_probs;
  at::Tensor tokens = batched(draft_tokens, single, 1, "draft_tokens", "[K]");
  const Placement where(target, "target_probs");
  const spec_edge::Rows t = rows_view(target, "target_probs", where);
  const spec_edge::Tokens d = tokens_view(tokens, "draft_tokens", where);
  prepare_outputs(n_accepted, next_token, single, t.batch, where);
  const spec_edge::VerifyResult out{n_accepted.data_ptr<int64_t>(), next_token.data_ptr<int64_t>()};
  raise_if_error(Backend::verify_greedy(where, t, d, out));
  return {n_accepted, next_token};
}

template <class Backend>
std::tuple<at::Tensor, at::Tensor> verify_greedy(const at::Tensor& target_probs,
                                                 const at::Tensor& draft_tokens) {
  const auto options = target_probs.options().dtype(at::kLong);
  at::Tensor n = at::empty({0}, options), next = at::empty({0}, options);
  verify_greedy_out<Backend>(target_probs, draft_tokens, n, next);
  return {n, next};
}

template <class Backend>
std::tuple<at::Tensor&, at::Tensor&> accept_out(const at::Tensor& target_probs,
                                                const std::optional<at::Tensor>& draft_probs,
                                                const at::Tensor& draft_tokens,
                                                const at::Tensor& uniforms, at::Tensor& n_accepted,
                                                at::Tensor& next_token) {
  const bool single = is_single(target_probs, "target_probs");
  at::Tensor target = single ? target_probs.unsqueeze(0) : target_probs;
  at::Tensor tokens = batched(draft_tokens, single, 1, "draft_tokens", "[K]");
  const Placement where(target, "target_probs");
  at::Tensor u = where.host(batched(uniforms, single, 1, "uniforms", "[K+1]"), "uniforms");
  TORCH_CHECK_TYPE(u.scalar_type() == at::kDouble || u.scalar_type() == at::kFloat,
                   "uniforms: unsupported dtype ", u.scalar_type(), "; expected float64 or float32");
  at::Tensor draft;
  spec_edge::Rows q;
  if (draft_probs.has_value()) {
    draft = batched(*draft_probs, single, 2, "draft_probs", "[K, V]");
    q = rows_view(draft, "draft_probs", where);
  }
  const spec_edge::Rows p = rows_view(target, "target_probs", where);
  const spec_edge::Tokens d = tokens_view(tokens, "draft_tokens", where);
  spec_edge::Uniforms uv;
  uv.data = u.data_ptr();
  uv.dtype = u.scalar_type() == at::kDouble ? spec_edge::DType::kFloat64 : spec_edge::DType::kFloat32;
  uv.batch = u.size(0);
  uv.len = u.size(1);
  uv.batch_stride = u.stride(0);
  uv.stride = u.stride(1);
  prepare_outputs(n_accepted, next_token, single, p.batch, where);
  const spec_edge::Rows* qp = draft_probs.has_value() ? &q : nullptr;
  const spec_edge::VerifyResult out{n_accepted.data_ptr<int64_t>(), next_token.data_ptr<int64_t>()};
  raise_if_error(Backend::accept(where, p, qp, d, uv, out));
  return {n_accepted, next_token};
}

template <class Backend>
std::tuple<at::Tensor, at::Tensor> accept(const at::Tensor& target_probs,
                                          const std::optional<at::Tensor>& draft_probs,
                                          const at::Tensor& draft_tokens, const at::Tensor& uniforms) {
  const auto options = target_probs.options().dtype(at::kLong);
  at::Tensor n = at::empty({0}, options), next = at::empty({0}, options);
  accept_out<Backend>(target_probs, draft_probs, draft_tokens, uniforms, n, next);
  return {n, next};
}

// A per-row parameter tensor: a 0-d or 1-element tensor, or one value per batch row.
template <class T>
spec_edge::PerRow<T> per_row(const at::Tensor& tensor, at::ScalarType dtype, const char* name,
                             at::Tensor& holder, const Placement& where) {
  const at::Tensor t = where.host(tensor, name);
  TORCH_CHECK_VALUE(t.dim() <= 1, name, ": expected a scalar or a [B] tensor, got shape ", t.sizes());
  if (dtype == at::kFloat) {
    TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), name, ": expected a floating tensor, got ",
                     t.scalar_type());
  } else {
    TORCH_CHECK_TYPE(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), name,
                     ": expected an integer tensor, got ", t.scalar_type());
  }
  holder = t.to(dtype).contiguous();
  if (dtype == at::kFloat && t.scalar_type() == at::kDouble) {
    // A positive float64 that rounds to 0 (a temperature of 1e-300) would silently mean greedy.
    const at::Tensor source = t.contiguous();
    for (int64_t i = 0; i < source.numel(); ++i) {
      const double v = source.data_ptr<double>()[i];
      TORCH_CHECK_VALUE(v == 0.0 || holder.data_ptr<float>()[i] != 0.0f, name, "[", i, "] = ", v,
                        " is too small: it rounds to 0 in float32");
    }
  }
  return {holder.data_ptr<T>(), holder.numel()};
}

// temperature, seed and offset as core per-row parameters; the holders keep converted copies.
struct SamplingParams {
  at::Tensor temperature_holder, seed_holder, offset_holder;
  spec_edge::PerRow<float> temperature;
  spec_edge::PerRow<int64_t> seed, offset;
  SamplingParams(const at::Tensor& t, const at::Tensor& s, const at::Tensor& o, const Placement& where)
      : temperature(per_row<float>(t, at::kFloat, "temperature", temperature_holder, where)),
        seed(per_row<int64_t>(s, at::kLong, "seed", seed_holder, where)),
        offset(per_row<int64_t>(o, at::kLong, "offset", offset_holder, where)) {}
};

using OptTensor = std::optional<at::Tensor>;

// The optional filter tensors (None: filter off) as core filters.
struct FilterParams {
  at::Tensor top_k_h, top_p_h, min_p_h, penalty_h, prev_h;
  spec_edge::Filters filters;
  FilterParams(const OptTensor& top_k, const OptTensor& top_p, const OptTensor& min_p,
               const OptTensor& repetition_penalty, const OptTensor& prev_tokens,
               const Placement& where) {
    if (top_k) filters.top_k = per_row<int64_t>(*top_k, at::kLong, "top_k", top_k_h, where);
    if (top_p) filters.top_p = per_row<float>(*top_p, at::kFloat, "top_p", top_p_h, where);
    if (min_p) filters.min_p = per_row<float>(*min_p, at::kFloat, "min_p", min_p_h, where);
    if (repetition_penalty)
      filters.repetition_penalty = per_row<float>(*repetition_penalty, at::kFloat,
                                                  "repetition_penalty", penalty_h, where);
    if (prev_tokens) {
      TORCH_CHECK_VALUE(prev_tokens->dim() == 1 || prev_tokens->dim() == 2,
                        "prev_tokens: expected shape [L] or [B, L], got ", prev_tokens->sizes());
      prev_h = prev_tokens->dim() == 1 ? prev_tokens->unsqueeze(0) : *prev_tokens;
      filters.prev_tokens = tokens_view(prev_h, "prev_tokens", where);
    }
  }
};

template <class Backend>
std::tuple<at::Tensor&, at::Tensor&> verify_out(
    const at::Tensor& target_logits, const at::Tensor& draft_logits, const at::Tensor& draft_tokens,
    const at::Tensor& temperature, const at::Tensor& seed, const at::Tensor& offset,
    const OptTensor& num_draft, const OptTensor& top_k, const OptTensor& top_p,
    const OptTensor& min_p, const OptTensor& repetition_penalty, const OptTensor& prev_tokens,
    at::Tensor& accept_len, at::Tensor& out) {
  at::Tensor target = target_logits, draft = draft_logits, tokens = draft_tokens;
  const Placement where(target, "target_logits");
  const spec_edge::Rows p = rows_view(target, "target_logits", where);
  const spec_edge::Rows q = rows_view(draft, "draft_logits", where);
  const spec_edge::Tokens d = tokens_view(tokens, "draft_tokens", where);
  at::Tensor num_h;
  const SamplingParams sampling(temperature, seed, offset, where);
  const FilterParams filter(top_k, top_p, min_p, repetition_penalty, prev_tokens, where);
  spec_edge::VerifyParams params;
  params.temperature = sampling.temperature;
  params.seed = sampling.seed;
  params.offset = sampling.offset;
  params.filters = filter.filters;
  if (num_draft.has_value()) {
    const at::Tensor nd = where.host(*num_draft, "num_draft");
    TORCH_CHECK_VALUE(nd.dim() == 1 && nd.size(0) == p.batch,
                      "num_draft: expected shape [B=", p.batch, "], got ", nd.sizes());
    TORCH_CHECK_TYPE(at::isIntegralType(nd.scalar_type(), false),
                     "num_draft: expected an integer tensor, got ", nd.scalar_type());
    num_h = nd.to(at::kLong).contiguous();
    params.num_draft = num_h.data_ptr<int64_t>();
  }
  for (at::Tensor* o : {&accept_len, &out}) {
    TORCH_CHECK_TYPE(o->scalar_type() == at::kLong, "out tensors must be int64, got ",
                     o->scalar_type());
    where.check(*o, "out");
  }
  at::native::resize_output(accept_len, {p.batch});
  at::native::resize_output(out, {p.batch, p.rows});
  TORCH_CHECK_VALUE(accept_len.is_contiguous() && out.is_contiguous(),
                    "out tensors must be contiguous");
  const spec_edge::VerifyOutput result{accept_len.data_ptr<int64_t>(), out.data_ptr<int64_t>(), p.rows};
  raise_if_error(Backend::verify(where, p, q, d, params, result));
  return {accept_len, out};
}

template <class Backend>
std::tuple<at::Tensor, at::Tensor> verify(
    const at::Tensor& target_logits, const at::Tensor& draft_logits, const at::Tensor& draft_tokens,
    const at::Tensor& temperature, const at::Tensor& seed, const at::Tensor& offset,
    const OptTensor& num_draft, const OptTensor& top_k, const OptTensor& top_p,
    const OptTensor& min_p, const OptTensor& repetition_penalty, const OptTensor& prev_tokens) {
  const auto options = target_logits.options().dtype(at::kLong);
  at::Tensor len = at::empty({0}, options), out = at::empty({0}, options);
  verify_out<Backend>(target_logits, draft_logits, draft_tokens, temperature, seed, offset, num_draft, top_k,
             top_p, min_p, repetition_penalty, prev_tokens, len, out);
  return {len, out};
}

// A [B, V] logits tensor as [B, 1, V] rows.
spec_edge::Rows logits_view(const at::Tensor& logits, at::Tensor& holder, const Placement& where) {
  TORCH_CHECK_VALUE(logits.dim() == 2, "logits: expected shape [B, V], got ", logits.sizes());
  holder = logits.unsqueeze(1);
  return rows_view(holder, "logits", where);
}

template <class Backend>
at::Tensor& sample_out(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& seed,
                       const at::Tensor& offset, const OptTensor& top_k, const OptTensor& top_p,
                       const OptTensor& min_p, const OptTensor& repetition_penalty,
                       const OptTensor& prev_tokens, at::Tensor& out) {
  at::Tensor holder;
  const Placement where(logits, "logits");
  const spec_edge::Rows r = logits_view(logits, holder, where);
  const SamplingParams sampling(temperature, seed, offset, where);
  const FilterParams filter(top_k, top_p, min_p, repetition_penalty, prev_tokens, where);
  const spec_edge::SampleParams params{sampling.temperature, sampling.seed, sampling.offset,
                                       filter.filters};
  TORCH_CHECK_TYPE(out.scalar_type() == at::kLong, "out: expected int64, got ", out.scalar_type());
  where.check(out, "out");
  at::native::resize_output(out, {r.batch});
  TORCH_CHECK_VALUE(out.is_contiguous(), "out tensors must be contiguous");
  raise_if_error(Backend::sample(where, r, params, out.data_ptr<int64_t>()));
  return out;
}

template <class Backend>
at::Tensor sample(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& seed,
                  const at::Tensor& offset, const OptTensor& top_k, const OptTensor& top_p,
                  const OptTensor& min_p, const OptTensor& repetition_penalty,
                  const OptTensor& prev_tokens) {
  at::Tensor out = at::empty({0}, logits.options().dtype(at::kLong));
  sample_out<Backend>(logits, temperature, seed, offset, top_k, top_p, min_p, repetition_penalty,
             prev_tokens, out);
  return out;
}

template <class Backend>
at::Tensor& filter_logits_out(const at::Tensor& logits, const at::Tensor& temperature,
                              const OptTensor& top_k, const OptTensor& top_p,
                              const OptTensor& min_p, const OptTensor& repetition_penalty,
                              const OptTensor& prev_tokens, at::Tensor& out) {
  at::Tensor holder;
  const Placement where(logits, "logits");
  const spec_edge::Rows r = logits_view(logits, holder, where);
  at::Tensor temperature_h;
  const auto T = per_row<float>(temperature, at::kFloat, "temperature", temperature_h, where);
  const FilterParams filter(top_k, top_p, min_p, repetition_penalty, prev_tokens, where);
  TORCH_CHECK_TYPE(out.scalar_type() == logits.scalar_type(), "out: expected dtype ",
                   logits.scalar_type(), " (the logits'), got ", out.scalar_type());
  where.check(out, "out");
  at::native::resize_output(out, logits.sizes());
  TORCH_CHECK_VALUE(out.is_contiguous(), "out tensors must be contiguous");
  at::Tensor result = out.scalar_type() == at::kFloat ? out : at::empty(logits.sizes(), where.options(at::kFloat));
  raise_if_error(Backend::filter_logits(where, r, T, filter.filters, result.data_ptr<float>(), r.vocab));
  if (!result.is_same(out)) out.copy_(result);
  return out;
}

template <class Backend>
at::Tensor filter_logits(const at::Tensor& logits, const at::Tensor& temperature,
                         const OptTensor& top_k, const OptTensor& top_p, const OptTensor& min_p,
                         const OptTensor& repetition_penalty, const OptTensor& prev_tokens) {
  at::Tensor out = at::empty({0}, logits.options());
  filter_logits_out<Backend>(logits, temperature, top_k, top_p, min_p, repetition_penalty, prev_tokens, out);
  return out;
}

// A [B, S, H, D] tensor as a core view: T is float (const for an input) or spec_edge::Half.
template <class T>
spec_edge::Heads<T> heads_view(const at::Tensor& t, const char* name) {
  constexpr bool half = std::is_same_v<std::remove_const_t<T>, spec_edge::Half>;
  check_cpu(t, name);
  TORCH_CHECK_TYPE(t.scalar_type() == (half ? at::kHalf : at::kFloat), name, ": unsupported dtype ",
                   t.scalar_type(), "; expected ", half ? "float16" : "float32");
  TORCH_CHECK_VALUE(t.dim() == 4, name, ": expected rank 4 [B, S, H, D], got shape ", t.sizes());
  TORCH_CHECK_VALUE(t.size(3) <= 1 || t.stride(3) == 1, name,
                    ": expected a contiguous last (head dim) axis, got strides ", t.strides());
  return spec_edge::Heads<T>{static_cast<T*>(t.data_ptr()), t.size(0), t.size(1), t.size(2), t.size(3),
                             t.stride(0), t.stride(1), t.stride(2)};
}

// A KV cache is float32 or float16 (16-bit caches: half the bytes a step reads).
bool half_cache(const at::Tensor& cache, const char* name) {
  TORCH_CHECK_TYPE(cache.scalar_type() == at::kFloat || cache.scalar_type() == at::kHalf, name,
                   ": unsupported dtype ", cache.scalar_type(), "; expected float32 or float16");
  return cache.scalar_type() == at::kHalf;
}

// `out` is a one-element placeholder (the op's effect is on `cache`), as in ExecuTorch's own.
at::Tensor& update_cache_out(const at::Tensor& value, at::Tensor& cache, int64_t start_pos, at::Tensor& out) {
  const at::Tensor v = value.dim() == 4 && value.size(3) > 1 && value.stride(3) != 1 ? value.contiguous() : value;
  const auto vv = heads_view<const float>(v, "value");
  raise_if_error(half_cache(cache, "cache")
                     ? spec_edge::update_cache(vv, heads_view<spec_edge::Half>(cache, "cache"), start_pos)
                     : spec_edge::update_cache(vv, heads_view<float>(cache, "cache"), start_pos));
  at::native::resize_output(out, {1});
  return out;
}

at::Tensor update_cache(const at::Tensor& value, at::Tensor& cache, int64_t start_pos) {
  at::Tensor out = at::zeros({1}, value.options());
  update_cache_out(value, cache, start_pos, out);
  return out;
}

template <class C>
void attend(const spec_edge::ConstHeads& q, const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t start_pos,
            const spec_edge::Heads<float>& out) {
  const auto kv = heads_view<const C>(k_cache, "k_cache"), vv = heads_view<const C>(v_cache, "v_cache");
  raise_if_error(spec_edge::attention(q, kv, vv, start_pos, out, 0, 0));  // the checks alone
  // The query heads split between PyTorch's intra-op threads, as the ExecuTorch kernel splits
  // them: each head is computed alone, so every thread count gives the same bits.
  at::parallel_for(0, q.heads, 1, [&](int64_t begin, int64_t end) {
    spec_edge::attention(q, kv, vv, start_pos, out, begin, end);
  });
}

at::Tensor& attention_out(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          int64_t start_pos, at::Tensor& out) {
  const at::Tensor qc = q.dim() == 4 && q.size(3) > 1 && q.stride(3) != 1 ? q.contiguous() : q;
  const auto qv = heads_view<const float>(qc, "q");
  TORCH_CHECK_TYPE(out.scalar_type() == at::kFloat, "out: expected float32, got ", out.scalar_type());
  check_cpu(out, "out");
  at::native::resize_output(out, q.sizes());
  TORCH_CHECK_VALUE(out.is_contiguous(), "out tensors must be contiguous");
  const bool half = half_cache(k_cache, "k_cache");
  TORCH_CHECK_TYPE(v_cache.scalar_type() == k_cache.scalar_type(), "v_cache: expected the dtype of k_cache (",
                   k_cache.scalar_type(), "), got ", v_cache.scalar_type());
  const auto ov = heads_view<float>(out, "out");
  if (half) attend<spec_edge::Half>(qv, k_cache, v_cache, start_pos, ov);
  else attend<float>(qv, k_cache, v_cache, start_pos, ov);
  return out;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     int64_t start_pos) {
  at::Tensor out = at::empty({0}, q.options());
  attention_out(q, k_cache, v_cache, start_pos, out);
  return out;
}

}  // namespace

TORCH_LIBRARY(spec_edge, m) {
#define DEFINE(name, ...)                       \
  m.def(spec_edge::schema::name.data());        \
  m.def(spec_edge::schema::name##_out.data());
  SPEC_EDGE_OPS(DEFINE)
#undef DEFINE
}

// The sampling ops' kernels for tensors of one backend.
#define IMPL(name)                                   \
  m.impl(#name, &name<Backend>);                     \
  m.impl(#name ".out", &name##_out<Backend>);
template <class Backend>
void register_sampling_ops(torch::Library& m) {
  SPEC_EDGE_SAMPLING_OPS(IMPL)
}
#undef IMPL

#if defined(SPEC_EDGE_WITH_CUDA)
TORCH_LIBRARY_IMPL(spec_edge, CUDA, m) { register_sampling_ops<CudaBackend>(m); }
#endif

TORCH_LIBRARY_IMPL(spec_edge, CPU, m) {
  register_sampling_ops<CpuBackend>(m);
  m.impl("update_cache", &update_cache);
  m.impl("update_cache.out", &update_cache_out);
  m.impl("attention", &attention);
  m.impl("attention.out", &attention_out);
}

// ISA queries for Python (ctypes), on the same library that registers the ops.
extern "C" {
__attribute__((visibility("default"))) const char* spec_edge_active_isa() {
  return spec_edge::active_isa();
}
__attribute__((visibility("default"))) const char* spec_edge_available_isas() {
  return spec_edge::available_isas();
}
// The ops' checks of one sequence's sampling settings (the Python .pte loop's, before any
// program runs): null, or the message.
__attribute__((visibility("default"))) const char* spec_edge_check_sampling(int64_t vocab, float temperature,
                                                                            int64_t top_k, float top_p,
                                                                            float min_p, float penalty) {
  static thread_local char message[320];
  spec_edge::Filters f;
  f.top_k = {&top_k, 1};
  f.top_p = {&top_p, 1};
  f.min_p = {&min_p, 1};
  f.repetition_penalty = {&penalty, 1};
  const Status s = spec_edge::check_sampling_settings(vocab, temperature, f);
  if (s.is_ok()) return nullptr;
  std::snprintf(message, sizeof message, "%s", s.message());
  return message;
}
__attribute__((visibility("default"))) const char* spec_edge_select_isa(const char* name) {
  static thread_local char message[320];
  const Status s = spec_edge::select_isa(name);
  if (s.is_ok()) return nullptr;
  std::snprintf(message, sizeof message, "%s", s.message());
  return message;
}
}
