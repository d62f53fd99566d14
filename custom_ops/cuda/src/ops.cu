// The CUDA build of the ops: one thread block per sequence, the rows read by all its threads,
// every order-sensitive sum in the order of the scalar reference (docs/OPS.md, "Numerics").
// One translation unit, in parts by role (each a header here, the twin of a core file where the
// core has one):
//  - launch.cuh: the threads per sequence, a row's fault report, parameters and scratch.
//  - block_reduce.cuh: block-wide maxima, first indices, masses (each warp folds 64-value blocks
//    as numerics.h does, one thread adds the block sums left to right in double), inverse CDFs
//    over those sums, and compaction in index order.
//  - logit_row.cuh: a logit row under the penalty, its checks and its greedy token.
//  - envelope_draw.cuh: the seeded draw from the envelope of block maxima (envelope_draw.cpp).
//  - kept_set.cuh: top-k by a radix select of the k-th largest key, top-p's guess by a bitonic
//    sort of the core's strided sample, then kept_set.h's scalar steps on one thread (kept_set.cpp).
//  - residual.cuh: the residual over two kept sets (residual.cpp).
//  - kernels.cuh: the five kernels; this file: the host side (checks, uploads, launches, faults).
// The core is read through spec_edge/detail/ only. Nothing here is compiled with FMA contraction
// (--fmad=false), so each float operation is the one the definition names.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels.cuh"
#include "spec_edge/cuda_ops.h"
#include "spec_edge/detail/validate.h"

namespace spec_edge {
namespace cuda {
namespace {

// ---- host side ----------------------------------------------------------------------------------

Status device_error(cudaError_t e, const char* what) {
  return Status::error(Code::kDeviceError, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}
#define SPEC_EDGE_CUDA_RETURN(expr, what)          \
  do {                                             \
    const cudaError_t _e = (expr);                 \
    if (_e != cudaSuccess) return device_error(_e, what); \
  } while (0)

// The host inputs of one launch, packed into one upload: per-row parameters, tokens [B, K],
// uniforms [B, K+1] and the penalized ids, then room for the faults and the per-row scratch.
struct Upload {
  std::vector<RowParams> params;
  std::vector<int64_t> tokens, prev_ids;
  std::vector<double> uniforms;
};

size_t align16(size_t n) { return (n + 15) / 16 * 16; }
template <class V>
size_t bytes_of(const std::vector<V>& v) { return align16(v.size() * sizeof(V)); }

class Workspace {
 public:
  explicit Workspace(cudaStream_t stream) : stream_(stream) {}
  ~Workspace() {
    if (base_ != nullptr) cudaFreeAsync(base_, stream_);
  }
  // Allocates, uploads `up` and fills `L`'s pointers.
  Status prepare(const Upload& up, int64_t B, int64_t K, int64_t V, bool scratch, Launch* L) {
    const size_t head = bytes_of(up.params) + bytes_of(up.tokens) + bytes_of(up.uniforms) + bytes_of(up.prev_ids);
    const size_t faults = align16(B * sizeof(RowFault));
    const bool filtered = std::any_of(up.params.begin(), up.params.end(), [](const RowParams& p) { return p.filtered(); });
    const int64_t stride = scratch ? Scratch().place(nullptr, V, filtered) : 0;
    const size_t total = head + faults + static_cast<size_t>(stride) * static_cast<size_t>(B);
    SPEC_EDGE_CUDA_RETURN(cudaMallocAsync(&base_, std::max<size_t>(total, 16), stream_), "cudaMallocAsync");
    host_.assign(head, 0);
    size_t at = 0;
    const auto put = [&](const auto& v) {
      const size_t n = v.size() * sizeof(v[0]);
      if (n > 0) std::memcpy(host_.data() + at, v.data(), n);
      char* device = base_ + at;
      at += bytes_of(v);
      return device;
    };
    L->params = reinterpret_cast<const RowParams*>(put(up.params));
    L->tokens = reinterpret_cast<const int64_t*>(put(up.tokens));
    L->uniforms = reinterpret_cast<const double*>(put(up.uniforms));
    L->prev_ids = reinterpret_cast<const int64_t*>(put(up.prev_ids));
    L->K = K;
    L->faults = reinterpret_cast<RowFault*>(base_ + head);
    L->scratch = base_ + head + faults;
    L->scratch_stride = stride;
    L->filtered = filtered;
    faults_ = L->faults;
    B_ = B;
    if (head > 0)
      SPEC_EDGE_CUDA_RETURN(cudaMemcpyAsync(base_, host_.data(), head, cudaMemcpyHostToDevice, stream_),
                            "cudaMemcpyAsync (inputs)");
    SPEC_EDGE_CUDA_RETURN(cudaMemsetAsync(L->faults, 0, faults, stream_), "cudaMemsetAsync (faults)");
    return Status::ok();
  }
  // Waits for the kernel and returns the first row fault in batch order (kNone if none).
  Status faults(std::vector<RowFault>* out) {
    SPEC_EDGE_CUDA_RETURN(cudaGetLastError(), "the kernel launch");
    out->resize(B_);
    if (B_ > 0)
      SPEC_EDGE_CUDA_RETURN(cudaMemcpyAsync(out->data(), faults_, B_ * sizeof(RowFault),
                                            cudaMemcpyDeviceToHost, stream_),
                            "cudaMemcpyAsync (faults)");
    SPEC_EDGE_CUDA_RETURN(cudaStreamSynchronize(stream_), "the kernel");
    return Status::ok();
  }

 private:
  cudaStream_t stream_;
  char* base_ = nullptr;
  std::vector<char> host_;
  RowFault* faults_ = nullptr;
  int64_t B_ = 0;
};

// The core's message for a row fault; names[0] / names[1]: the target's and the draft's tensor.
Status fault_status(const RowFault& f, int64_t b, const char* const names[2], bool batched_rows) {
  const RowName where{names[f.tensor], b, batched_rows ? f.row : -1};
  const std::string at = where.prefix();
  switch (f.fault) {
    case Fault::kNaN:
      return Status::error(Code::kInvalidArgument, "%s, %lld] is NaN", at.c_str(), (ll)f.index);
    case Fault::kBadLogit:
      return Status::error(Code::kInvalidArgument, "%s, %lld] = %g: logits must not be NaN or +inf",
                           at.c_str(), (ll)f.index, (double)f.value);
    case Fault::kNoFinite:
      return Status::error(Code::kInvalidArgument, "%s] has no finite logit (every token is masked)",
                           at.c_str());
    case Fault::kPenaltyInf:
      return Status::error(Code::kInvalidArgument, "%s, %lld] = %g: the repetition penalty %g makes it +inf",
                           at.c_str(), (ll)f.index, (double)f.value, f.detail);
    case Fault::kBadProb:
      return Status::error(Code::kInvalidArgument,
                           "%s, %lld] = %g: probabilities must be finite and >= 0", at.c_str(),
                           (ll)f.index, (double)f.value);
    case Fault::kBadMass:
      return Status::error(Code::kInvalidArgument,
                           "%s] has mass %g: a probability row needs a finite sum >= %g (an "
                           "all-zero row is not a distribution)",
                           at.c_str(), f.detail, (double)FLT_MIN);
    case Fault::kScaledInf:
      return Status::error(Code::kInvalidArgument,
                           "%s, %lld] = %g: divided by the temperature %g it overflows %s "
                           "(filter_logits cannot return it; sample and verify take the row)",
                           at.c_str(), (ll)f.index, (double)f.value, f.detail,
                           f.dtype == DType::kFloat32 ? "float" : dtype_name(f.dtype));
    case Fault::kNone: break;
  }
  return Status::ok();
}

Status first_fault(Workspace& ws, const char* const names[2], bool batched_rows) {
  std::vector<RowFault> faults;
  SPEC_EDGE_RETURN_IF_ERROR(ws.faults(&faults));
  for (size_t b = 0; b < faults.size(); ++b)
    if (faults[b].fault != Fault::kNone) return fault_status(faults[b], static_cast<int64_t>(b), names, batched_rows);
  return Status::ok();
}

// kernel<<<blocks, kThreads, 0, stream>>>(args...)
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), int64_t blocks, void* stream, Args... args) {
#if defined(SPEC_EDGE_CUDA_EMULATION)
  (void)stream;
  emulation::launch(kernel, blocks, kThreads, static_cast<Params>(args)...);
#else
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<Params>(args)...);
#endif
}

template <class T>
DeviceRows<T> device_rows(const Rows& r) {
  return DeviceRows<T>{static_cast<const T*>(r.data), r.batch_stride, r.row_stride, r.vocab};
}

// Calls f(DeviceRows<T>...) with the element type of `dtype`.
template <class F>
void with_dtype(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kFloat16: f(Half{}); break;
    case DType::kBFloat16: f(BFloat16{}); break;
    default: f(0.0f); break;
  }
}

std::vector<int64_t> packed_tokens(const Tokens& t, int64_t B, int64_t K, const int64_t* lengths) {
  std::vector<int64_t> out(static_cast<size_t>(B * K), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < (lengths ? lengths[b] : K); ++i) out[b * K + i] = t.at(b, i);
  return out;
}

Status check_vocab(const Rows& r) {
  if (r.vocab > (int64_t{1} << 31))
    return Status::error(Code::kInvalidArgument,
                         "V=%lld: the CUDA build takes vocabularies up to 2^31", (ll)r.vocab);
  return Status::ok();
}

// Per-row parameters and the penalized ids (PenalizedIds: sorted, deduplicated) of a batch.
void sampling_rows(PerRow<float> temperature, PerRow<int64_t> seed, PerRow<int64_t> offset,
                   const Filters& f, int64_t B, int64_t V, Upload* up) {
  up->params.resize(B);
  PenalizedIds ids;
  for (int64_t b = 0; b < B; ++b) {
    RowParams& p = up->params[b];
    const RowSampling rs = row_sampling(temperature, f, b, V);
    p.temperature = rs.temperature;
    p.penalty = rs.penalty;
    p.top_k = rs.top_k;
    p.top_p = rs.top_p;
    p.min_p = rs.min_p;
    p.min_p_floor = min_p_floor(rs.min_p);
    p.seed = static_cast<uint64_t>(seed.at(b));
    p.offset = static_cast<uint64_t>(offset.at(b));
    ids.reset(f, b, rs.penalty != 1.0f);
    p.prev_begin = static_cast<int64_t>(up->prev_ids.size());
    up->prev_ids.insert(up->prev_ids.end(), ids.ids().begin(), ids.ids().end());
    p.prev_end = static_cast<int64_t>(up->prev_ids.size());
  }
}

}  // namespace

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Status verify_greedy(const Rows& target, const Tokens& draft_tokens, VerifyResult out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify_greedy(target, draft_tokens));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  up.tokens = packed_tokens(draft_tokens, B, K, nullptr);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, false, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(verify_greedy_kernel<T>, B, stream, device_rows<T>(target), L, out.n_accepted, out.next_token);
  });
  const char* const names[2] = {"target_probs", "target_probs"};
  return first_fault(ws, names, true);
}

Status accept(const Rows& target, const Rows* draft, const Tokens& draft_tokens,
              const Uniforms& uniforms, VerifyResult out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_accept(target, draft, draft_tokens, uniforms));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  up.tokens = packed_tokens(draft_tokens, B, K, nullptr);
  up.uniforms.resize(B * (K + 1));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i <= K; ++i) up.uniforms[b * (K + 1) + i] = uniforms.at(b, i);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, true, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    const DeviceRows<T> q = draft != nullptr ? device_rows<T>(*draft) : device_rows<T>(target);
    launch(accept_kernel<T>, B, stream, device_rows<T>(target), q, draft != nullptr, L, out.n_accepted,
           out.next_token);
  });
  const char* const names[2] = {"target_probs", "draft_probs"};
  return first_fault(ws, names, true);
}

Status verify(const Rows& target, const Rows& draft, const Tokens& draft_tokens,
              const VerifyParams& params, VerifyOutput out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify(target, draft, draft_tokens, params));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  sampling_rows(params.temperature, params.seed, params.offset, params.filters, B, target.vocab, &up);
  for (int64_t b = 0; b < B; ++b) up.params[b].n_draft = params.num_draft ? params.num_draft[b] : K;
  std::vector<int64_t> lengths(B);
  for (int64_t b = 0; b < B; ++b) lengths[b] = up.params[b].n_draft;
  up.tokens = packed_tokens(draft_tokens, B, K, lengths.data());
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, true, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(verify_kernel<T>, B, stream, device_rows<T>(target), device_rows<T>(draft), L, out.accept_len,
           out.tokens, out.tokens_stride);
  });
  const char* const names[2] = {"target_logits", "draft_logits"};
  return first_fault(ws, names, true);
}

Status filter_logits(const Rows& logits, PerRow<float> temperature, const Filters& filters, float* out,
                     int64_t out_stride, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, temperature, 1, 1, filters));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(logits));
  const int64_t B = logits.batch;
  if (B == 0) return Status::ok();
  Upload up;
  const int64_t zero = 0;
  sampling_rows(temperature, {&zero, 1}, {&zero, 1}, filters, B, logits.vocab, &up);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, 0, logits.vocab, true, &L));
  with_dtype(logits.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(filter_kernel<T>, B, stream, device_rows<T>(logits), L, out, out_stride);
  });
  const char* const names[2] = {"logits", "logits"};
  return first_fault(ws, names, false);
}

Status sample(const Rows& logits, const SampleParams& params, int64_t* tokens, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, params.temperature, params.seed.count,
                                                   params.offset.count, params.filters));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(logits));
  const int64_t B = logits.batch;
  if (B == 0) return Status::ok();
  Upload up;
  sampling_rows(params.temperature, params.seed, params.offset, params.filters, B, logits.vocab, &up);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, 0, logits.vocab, true, &L));
  with_dtype(logits.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(sample_kernel<T>, B, stream, device_rows<T>(logits), L, tokens);
  });
  const char* const names[2] = {"logits", "logits"};
  return first_fault(ws, names, false);
}

}  // namespace cuda
}  // namespace spec_edge
