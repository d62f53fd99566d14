// ExecuTorch runtime kernels: the `.out` variant of every spec_edge op, over the same core.
//
// Most ops return two tensors, which EXECUTORCH_LIBRARY cannot wrap, so each kernel is boxed by
// hand: the stack holds the inputs, then the out tensors, then the return slot(s). Each argument
// is read at the position its name has in the op's schema (spec_edge/op_schemas.h), found at
// compile time. Argument checks follow ExecuTorch's custom ops (validate under ET_KERNEL_CHECK: a
// logged reason and InvalidArgument, never a crash); value checks come from the core's Status.
#include <vector>

#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

#include "spec_edge/attention.h"
#include "spec_edge/op_schemas.h"
#include "spec_edge/ops.h"

namespace spec_edge_et {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

bool score_dtype(const Tensor& t, const char* name, spec_edge::DType* dtype) {
  switch (t.scalar_type()) {
    case ScalarType::Float: *dtype = spec_edge::DType::kFloat32; return true;
    case ScalarType::Half: *dtype = spec_edge::DType::kFloat16; return true;
    case ScalarType::BFloat16: *dtype = spec_edge::DType::kBFloat16; return true;
    default:
      ET_LOG(Error, "%s: unsupported dtype %d; expected float32, float16 or bfloat16", name,
             static_cast<int>(t.scalar_type()));
      return false;
  }
}

// [K+1, V] / [K, V] (single) or [B, rows, V] scores with a unit-stride vocabulary axis.
bool validate_rows(const Tensor& t, bool single, const char* name, spec_edge::Rows* r) {
  const int rank = single ? 2 : 3;
  if (t.dim() != rank) {
    ET_LOG(Error, "%s: expected rank %d, got %d", name, rank, static_cast<int>(t.dim()));
    return false;
  }
  if (!score_dtype(t, name, &r->dtype)) return false;
  const int o = single ? 0 : 1;
  if (t.size(o + 1) > 1 && t.strides()[o + 1] != 1) {
    ET_LOG(Error, "%s: the vocabulary axis must be contiguous", name);
    return false;
  }
  r->data = t.const_data_ptr();
  r->batch = single ? 1 : t.size(0);
  r->rows = t.size(o);
  r->vocab = t.size(o + 1);
  r->batch_stride = single ? 0 : t.strides()[0];
  r->row_stride = t.strides()[o];
  return true;
}

bool validate_tokens(const Tensor& t, bool single, const char* name, spec_edge::Tokens* v) {
  const int rank = single ? 1 : 2;
  if (t.dim() != rank || t.scalar_type() != ScalarType::Long) {
    ET_LOG(Error, "%s: expected an int64 tensor of rank %d", name, rank);
    return false;
  }
  v->data = t.const_data_ptr<int64_t>();
  v->batch = single ? 1 : t.size(0);
  v->len = t.size(rank - 1);
  v->batch_stride = single ? 0 : t.strides()[0];
  v->stride = t.strides()[rank - 1];
  return true;
}

// Out tensors: int64, resized to `sizes`.
bool prepare_out(Tensor& out, executorch::aten::ArrayRef<SizesType> sizes, const char* name,
                 ScalarType dtype = ScalarType::Long) {
  if (out.scalar_type() != dtype) {
    ET_LOG(Error, "%s: expected an out tensor of dtype %d", name, static_cast<int>(dtype));
    return false;
  }
  if (executorch::runtime::resize_tensor(out, sizes) != Error::Ok) {
    ET_LOG(Error, "%s: cannot resize the out tensor", name);
    return false;
  }
  return true;
}

// The stack position of argument `name` of op `op`'s out form.
#define ARG(op, name) SPEC_EDGE_ARG(spec_edge::schema::op##_out, name)

// The (n_accepted, next_token) out tensors: shape [] or [B].
bool prepare_result(Tensor& n_accepted, Tensor& next_token, int64_t batch, bool single,
                    spec_edge::VerifyResult* result) {
  const SizesType sizes[1] = {static_cast<SizesType>(batch)};
  const executorch::aten::ArrayRef<SizesType> shape(sizes, single ? 0 : 1);
  if (!prepare_out(n_accepted, shape, "n_accepted") || !prepare_out(next_token, shape, "next_token"))
    return false;
  *result = {n_accepted.mutable_data_ptr<int64_t>(), next_token.mutable_data_ptr<int64_t>()};
  return true;
}

bool ok(const spec_edge::Status& s, const char* op) {
  if (s.is_ok()) return true;
  ET_LOG(Error, "spec_edge::%s: %s", op, s.message());
  return false;
}

const Tensor* optional_tensor(EValue* v) { return v->isNone() ? nullptr : &v->toTensor(); }

// A stack with every argument of the out form `schema` (its inputs and out tensors), each of
// the schema's type: a damaged program that hands a kernel an int where a tensor belongs is an
// error of the call, not EValue::toTensor's abort of the process.
bool validate_stack(Span<EValue*> stack, std::string_view schema) {
  const size_t size = spec_edge::schema::argument_count(schema);
  const std::string_view op = spec_edge::schema::op_name(schema);
  if (stack.size() < size) {
    ET_LOG(Error, "spec_edge::%.*s: expected at least %zu stack values, got %zu",
           static_cast<int>(op.size()), op.data(), size, stack.size());
    return false;
  }
  for (size_t i = 0; i < size; ++i) {
    const std::string_view arg = spec_edge::schema::argument(schema, i);
    const EValue* v = stack[i];
    const bool optional = arg.substr(0, 7) == "Tensor?";
    const bool fits = v != nullptr && (arg.substr(0, 6) == "Tensor" ? v->isTensor() || (optional && v->isNone())
                                                                      : v->isInt());  // SymInt
    if (!fits) {
      const std::string_view name = spec_edge::schema::argument_name(arg);
      ET_LOG(Error, "spec_edge::%.*s: argument %.*s is not a %s (a damaged program?)", static_cast<int>(op.size()),
             op.data(), static_cast<int>(name.size()), name.data(),
             arg.substr(0, 6) == "Tensor" ? (optional ? "tensor or None" : "tensor") : "integer");
      return false;
    }
  }
  return true;
}

void verify_greedy_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::verify_greedy_out), InvalidArgument, );
  const Tensor& target = stack[ARG(verify_greedy, "target_probs")]->toTensor();
  const bool single = target.dim() == 2;
  spec_edge::Rows rows;
  spec_edge::Tokens tokens;
  ET_KERNEL_CHECK(ctx, validate_rows(target, single, "target_probs", &rows), InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  validate_tokens(stack[ARG(verify_greedy, "draft_tokens")]->toTensor(), single,
                                  "draft_tokens", &tokens),
                  InvalidArgument, );
  spec_edge::VerifyResult result;
  ET_KERNEL_CHECK(ctx,
                  prepare_result(stack[ARG(verify_greedy, "n_accepted")]->toTensor(),
                                 stack[ARG(verify_greedy, "next_token")]->toTensor(), rows.batch,
                                 single, &result),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx, ok(spec_edge::verify_greedy(rows, tokens, result), "verify_greedy"),
                  InvalidArgument, );
}

void accept_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::accept_out), InvalidArgument, );
  const Tensor& target = stack[ARG(accept, "target_probs")]->toTensor();
  const bool single = target.dim() == 2;
  spec_edge::Rows p, q;
  spec_edge::Tokens tokens;
  ET_KERNEL_CHECK(ctx, validate_rows(target, single, "target_probs", &p), InvalidArgument, );
  const Tensor* draft = optional_tensor(stack[ARG(accept, "draft_probs")]);
  ET_KERNEL_CHECK(ctx, draft == nullptr || validate_rows(*draft, single, "draft_probs", &q),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  validate_tokens(stack[ARG(accept, "draft_tokens")]->toTensor(), single,
                                  "draft_tokens", &tokens),
                  InvalidArgument, );
  const Tensor& u = stack[ARG(accept, "uniforms")]->toTensor();
  const int u_rank = single ? 1 : 2;
  ET_KERNEL_CHECK_MSG(ctx,
                      u.dim() == u_rank && (u.scalar_type() == ScalarType::Double ||
                                            u.scalar_type() == ScalarType::Float),
                      InvalidArgument, , "uniforms: expected float64/float32 of rank %d", u_rank);
  spec_edge::Uniforms uniforms;
  uniforms.data = u.const_data_ptr();
  uniforms.dtype = u.scalar_type() == ScalarType::Double ? spec_edge::DType::kFloat64
                                                         : spec_edge::DType::kFloat32;
  uniforms.batch = single ? 1 : u.size(0);
  uniforms.len = u.size(u_rank - 1);
  uniforms.batch_stride = single ? 0 : u.strides()[0];
  uniforms.stride = u.strides()[u_rank - 1];
  spec_edge::VerifyResult result;
  ET_KERNEL_CHECK(ctx,
                  prepare_result(stack[ARG(accept, "n_accepted")]->toTensor(),
                                 stack[ARG(accept, "next_token")]->toTensor(), p.batch, single,
                                 &result),
                  InvalidArgument, );
  ET_KERNEL_CHECK(
      ctx, ok(spec_edge::accept(p, draft ? &q : nullptr, tokens, uniforms, result), "accept"),
      InvalidArgument, );
}

template <class T>
bool per_row(const Tensor& t, ScalarType dtype, const char* name, spec_edge::PerRow<T>* out) {
  if (t.dim() > 1 || t.scalar_type() != dtype) {
    ET_LOG(Error, "%s: expected a scalar or [B] tensor of dtype %d", name, static_cast<int>(dtype));
    return false;
  }
  *out = {t.const_data_ptr<T>(), static_cast<int64_t>(t.numel())};
  return true;
}

// The positions of an op's sampling parameters and of its filters.
struct SamplingArgs {
  size_t temperature, seed, offset;
};
struct FilterArgs {
  size_t top_k, top_p, min_p, repetition_penalty, prev_tokens;
};
#define SAMPLING_ARGS(op) SamplingArgs{ARG(op, "temperature"), ARG(op, "seed"), ARG(op, "offset")}
#define FILTER_ARGS(op)                                                                    \
  FilterArgs {                                                                             \
    ARG(op, "top_k"), ARG(op, "top_p"), ARG(op, "min_p"), ARG(op, "repetition_penalty"),   \
        ARG(op, "prev_tokens")                                                             \
  }

// temperature (float32), seed and offset (int64), each a scalar or [B].
bool sampling_params(Span<EValue*> stack, SamplingArgs at, spec_edge::PerRow<float>* temperature,
                     spec_edge::PerRow<int64_t>* seed, spec_edge::PerRow<int64_t>* offset) {
  return per_row(stack[at.temperature]->toTensor(), ScalarType::Float, "temperature", temperature) &&
         per_row(stack[at.seed]->toTensor(), ScalarType::Long, "seed", seed) &&
         per_row(stack[at.offset]->toTensor(), ScalarType::Long, "offset", offset);
}

// The optional filters: top_k (int64), top_p, min_p, repetition_penalty (float32), each a scalar
// or [B]; prev_tokens, int64 [L] or [B, L]. None leaves a filter off.
bool filter_params(Span<EValue*> stack, FilterArgs at, spec_edge::Filters* f) {
  const Tensor* top_k = optional_tensor(stack[at.top_k]);
  const Tensor* top_p = optional_tensor(stack[at.top_p]);
  const Tensor* min_p = optional_tensor(stack[at.min_p]);
  const Tensor* penalty = optional_tensor(stack[at.repetition_penalty]);
  if ((top_k && !per_row(*top_k, ScalarType::Long, "top_k", &f->top_k)) ||
      (top_p && !per_row(*top_p, ScalarType::Float, "top_p", &f->top_p)) ||
      (min_p && !per_row(*min_p, ScalarType::Float, "min_p", &f->min_p)) ||
      (penalty && !per_row(*penalty, ScalarType::Float, "repetition_penalty", &f->repetition_penalty)))
    return false;
  if (const Tensor* prev = optional_tensor(stack[at.prev_tokens])) {
    if ((prev->dim() != 1 && prev->dim() != 2) || prev->scalar_type() != ScalarType::Long) {
      ET_LOG(Error, "prev_tokens: expected an int64 [L] or [B, L] tensor");
      return false;
    }
    const bool flat = prev->dim() == 1;
    f->prev_tokens.data = prev->const_data_ptr<int64_t>();
    f->prev_tokens.batch = flat ? 1 : prev->size(0);
    f->prev_tokens.len = prev->size(flat ? 0 : 1);
    f->prev_tokens.batch_stride = flat ? 0 : prev->strides()[0];
    f->prev_tokens.stride = prev->strides()[flat ? 0 : 1];
  }
  return true;
}

void verify_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::verify_out), InvalidArgument, );
  spec_edge::Rows p, q;
  spec_edge::Tokens tokens;
  spec_edge::VerifyParams params;
  ET_KERNEL_CHECK(ctx,
                  validate_rows(stack[ARG(verify, "target_logits")]->toTensor(), false,
                                "target_logits", &p),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  validate_rows(stack[ARG(verify, "draft_logits")]->toTensor(), false,
                                "draft_logits", &q),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  validate_tokens(stack[ARG(verify, "draft_tokens")]->toTensor(), false,
                                  "draft_tokens", &tokens),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  sampling_params(stack, SAMPLING_ARGS(verify), &params.temperature, &params.seed,
                                  &params.offset),
                  InvalidArgument, );
  if (const Tensor* num_draft = optional_tensor(stack[ARG(verify, "num_draft")])) {
    ET_KERNEL_CHECK_MSG(ctx,
                        num_draft->dim() == 1 && num_draft->size(0) == p.batch &&
                            num_draft->scalar_type() == ScalarType::Long,
                        InvalidArgument, , "num_draft: expected an int64 [B=%lld] tensor",
                        static_cast<long long>(p.batch));
    params.num_draft = num_draft->const_data_ptr<int64_t>();
  }
  ET_KERNEL_CHECK(ctx, filter_params(stack, FILTER_ARGS(verify), &params.filters), InvalidArgument, );
  Tensor& accept_len = stack[ARG(verify, "accept_len")]->toTensor();
  Tensor& out = stack[ARG(verify, "out")]->toTensor();
  const SizesType len_shape[1] = {static_cast<SizesType>(p.batch)};
  const SizesType out_shape[2] = {static_cast<SizesType>(p.batch), static_cast<SizesType>(p.rows)};
  ET_KERNEL_CHECK(ctx, prepare_out(accept_len, {len_shape, 1}, "accept_len"), InvalidArgument, );
  ET_KERNEL_CHECK(ctx, prepare_out(out, {out_shape, 2}, "out"), InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  ok(spec_edge::verify(p, q, tokens, params,
                                       {accept_len.mutable_data_ptr<int64_t>(),
                                        out.mutable_data_ptr<int64_t>(), p.rows}),
                     "verify"),
                  InvalidArgument, );
}

// [B, V] logits read as B rows of one.
bool validate_logits(const Tensor& logits, spec_edge::Rows* rows) {
  if (!validate_rows(logits, /*single=*/true, "logits", rows)) return false;
  rows->batch = rows->rows;
  rows->batch_stride = rows->row_stride;
  rows->rows = 1;
  return true;
}

void sample_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::sample_out), InvalidArgument, );
  spec_edge::Rows rows;
  ET_KERNEL_CHECK(ctx, validate_logits(stack[ARG(sample, "logits")]->toTensor(), &rows),
                  InvalidArgument, );
  spec_edge::SampleParams params;
  ET_KERNEL_CHECK(ctx,
                  sampling_params(stack, SAMPLING_ARGS(sample), &params.temperature, &params.seed,
                                  &params.offset),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx, filter_params(stack, FILTER_ARGS(sample), &params.filters), InvalidArgument, );
  Tensor& out = stack[ARG(sample, "out")]->toTensor();
  const SizesType shape[1] = {static_cast<SizesType>(rows.batch)};
  ET_KERNEL_CHECK(ctx, prepare_out(out, {shape, 1}, "out"), InvalidArgument, );
  ET_KERNEL_CHECK(ctx, ok(spec_edge::sample(rows, params, out.mutable_data_ptr<int64_t>()), "sample"),
                  InvalidArgument, );
}

void filter_logits_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::filter_logits_out), InvalidArgument, );
  const Tensor& logits = stack[ARG(filter_logits, "logits")]->toTensor();
  spec_edge::Rows rows;
  ET_KERNEL_CHECK(ctx, validate_logits(logits, &rows), InvalidArgument, );
  spec_edge::PerRow<float> temperature;
  spec_edge::Filters filters;
  ET_KERNEL_CHECK(ctx,
                  per_row(stack[ARG(filter_logits, "temperature")]->toTensor(), ScalarType::Float,
                          "temperature", &temperature),
                  InvalidArgument, );
  ET_KERNEL_CHECK(ctx, filter_params(stack, FILTER_ARGS(filter_logits), &filters), InvalidArgument, );
  Tensor& out = stack[ARG(filter_logits, "out")]->toTensor();
  ET_KERNEL_CHECK(ctx, prepare_out(out, logits.sizes(), "out", logits.scalar_type()),
                  InvalidArgument, );
  const bool f32 = out.scalar_type() == ScalarType::Float;
  std::vector<float> scratch(f32 ? 0 : static_cast<size_t>(out.numel()));
  float* result = f32 ? out.mutable_data_ptr<float>() : scratch.data();
  ET_KERNEL_CHECK(
      ctx, ok(spec_edge::filter_logits(rows, temperature, filters, result, rows.vocab), "filter_logits"),
      InvalidArgument, );
  if (out.scalar_type() == ScalarType::Half) {
    auto* o = out.mutable_data_ptr<executorch::aten::Half>();
    for (size_t i = 0; i < scratch.size(); ++i) o[i] = executorch::aten::Half(scratch[i]);
  } else if (out.scalar_type() == ScalarType::BFloat16) {
    auto* o = out.mutable_data_ptr<executorch::aten::BFloat16>();
    for (size_t i = 0; i < scratch.size(); ++i) o[i] = executorch::aten::BFloat16(scratch[i]);
  }
}

// A [B, S, H, D] tensor with a contiguous last axis: T is float (const for an input) or
// spec_edge::Half.
template <class T>
bool validate_heads(const Tensor& t, const char* name, spec_edge::Heads<T>* h) {
  constexpr bool half = std::is_same_v<std::remove_const_t<T>, spec_edge::Half>;
  if (t.dim() != 4 || t.scalar_type() != (half ? ScalarType::Half : ScalarType::Float)) {
    ET_LOG(Error, "%s: expected a %s tensor of rank 4 [B, S, H, D]", name, half ? "float16" : "float32");
    return false;
  }
  if (t.size(3) > 1 && t.strides()[3] != 1) {
    ET_LOG(Error, "%s: the last (head dim) axis must be contiguous", name);
    return false;
  }
  *h = spec_edge::Heads<T>{static_cast<T*>(t.mutable_data_ptr()), t.size(0), t.size(1), t.size(2), t.size(3),
                           t.strides()[0], t.strides()[1], t.strides()[2]};
  return true;
}

// A KV cache is float32 or float16 (16-bit caches: half the bytes a step reads).
bool valid_cache_dtype(const Tensor& cache, const char* name) {
  if (cache.scalar_type() == ScalarType::Float || cache.scalar_type() == ScalarType::Half) return true;
  ET_LOG(Error, "%s: expected float32 or float16", name);
  return false;
}

template <class C>
bool update_cache_of(const Tensor& value_tensor, const Tensor& cache_tensor, int64_t start_pos) {
  spec_edge::ConstHeads value;
  spec_edge::Heads<C> cache;
  return validate_heads(value_tensor, "value", &value) && validate_heads(cache_tensor, "cache", &cache) &&
         ok(spec_edge::update_cache(value, cache, start_pos), "update_cache");
}

void update_cache_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::update_cache_out), InvalidArgument, );
  const Tensor& value = stack[ARG(update_cache, "value")]->toTensor();
  const Tensor& cache = stack[ARG(update_cache, "cache")]->toTensor();
  const int64_t start_pos = stack[ARG(update_cache, "start_pos")]->toInt();
  ET_KERNEL_CHECK(ctx, valid_cache_dtype(cache, "cache"), InvalidArgument, );
  ET_KERNEL_CHECK(ctx,
                  cache.scalar_type() == ScalarType::Half ? update_cache_of<spec_edge::Half>(value, cache, start_pos)
                                                          : update_cache_of<float>(value, cache, start_pos),
                  InvalidArgument, );
}

// The query heads split between ExecuTorch's threads (the pool XNNPACK's kernels run on; one
// thread where the runtime has none): each head is computed alone, so the split leaves the bits
// as they are.
template <class C>
bool attend(const spec_edge::ConstHeads& q, const Tensor& k_tensor, const Tensor& v_tensor, int64_t start_pos,
            const spec_edge::Heads<float>& out) {
  spec_edge::Heads<const C> k_cache, v_cache;
  if (!validate_heads(k_tensor, "k_cache", &k_cache) || !validate_heads(v_tensor, "v_cache", &v_cache) ||
      !ok(spec_edge::attention(q, k_cache, v_cache, start_pos, out, 0, 0), "attention"))
    return false;
  executorch::extension::parallel_for(0, q.heads, 1, [&](int64_t begin, int64_t end) {
    spec_edge::attention(q, k_cache, v_cache, start_pos, out, begin, end);
  });
  return true;
}

void attention_out(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  ET_KERNEL_CHECK(ctx, validate_stack(stack, spec_edge::schema::attention_out), InvalidArgument, );
  const Tensor& q_tensor = stack[ARG(attention, "q")]->toTensor();
  const Tensor& k_tensor = stack[ARG(attention, "k_cache")]->toTensor();
  const Tensor& v_tensor = stack[ARG(attention, "v_cache")]->toTensor();
  spec_edge::ConstHeads q;
  spec_edge::Heads<float> out;
  ET_KERNEL_CHECK(ctx, validate_heads(q_tensor, "q", &q), InvalidArgument, );
  ET_KERNEL_CHECK(ctx, valid_cache_dtype(k_tensor, "k_cache"), InvalidArgument, );
  Tensor& out_tensor = stack[ARG(attention, "out")]->toTensor();
  ET_KERNEL_CHECK(ctx, prepare_out(out_tensor, q_tensor.sizes(), "out", ScalarType::Float), InvalidArgument, );
  ET_KERNEL_CHECK(ctx, validate_heads(out_tensor, "out", &out), InvalidArgument, );
  const int64_t start_pos = stack[ARG(attention, "start_pos")]->toInt();
  ET_KERNEL_CHECK(ctx,
                  k_tensor.scalar_type() == ScalarType::Half
                      ? attend<spec_edge::Half>(q, k_tensor, v_tensor, start_pos, out)
                      : attend<float>(q, k_tensor, v_tensor, start_pos, out),
                  InvalidArgument, );
}

// One kernel per op of op_schemas.h, each under its out form's name.
#define KERNEL(name, ...) executorch::runtime::Kernel("spec_edge::" #name ".out", name##_out),
const executorch::runtime::Kernel kKernels[] = {SPEC_EDGE_OPS(KERNEL)};
#undef KERNEL
constexpr size_t kKernelCount = sizeof(kKernels) / sizeof(kKernels[0]);

const auto kRegistered = executorch::runtime::register_kernels({kKernels, kKernelCount});

}  // namespace
}  // namespace spec_edge_et

// Referencing this symbol keeps the registration in statically linked binaries.
extern "C" __attribute__((visibility("default"))) int spec_edge_executorch_kernels_registered() {
  return spec_edge_et::kRegistered == executorch::runtime::Error::Ok
             ? static_cast<int>(spec_edge_et::kKernelCount)
             : 0;
}
