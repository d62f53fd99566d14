#include "spec_edge/attention.h"

#include "attention_kernel.h"

namespace spec_edge {
namespace {

template <class T>
Status check_heads(const Heads<T>& t, const char* name) {
  if (t.data == nullptr && t.batch * t.seq * t.heads * t.dim != 0)
    return Status::error(Code::kInvalidArgument, "%s: no data", name);
  if (t.batch < 0 || t.seq < 0 || t.heads < 1 || t.dim < 1)
    return Status::error(Code::kInvalidArgument,
                         "%s: expected shape [B, S, H >= 1, D >= 1], got [%lld, %lld, %lld, %lld]", name,
                         static_cast<long long>(t.batch), static_cast<long long>(t.seq),
                         static_cast<long long>(t.heads), static_cast<long long>(t.dim));
  return Status::ok();
}

template <class C>
Status check_cache(const Heads<C>& cache, const ConstHeads& x, int64_t start_pos, const char* name,
                   const char* x_name) {
  SPEC_EDGE_RETURN_IF_ERROR(check_heads(cache, name));
  if (cache.batch != x.batch || cache.dim != x.dim)
    return Status::error(Code::kInvalidArgument,
                         "%s: expected batch %lld and head dim %lld (those of %s), got %lld and %lld",
                         name, static_cast<long long>(x.batch), static_cast<long long>(x.dim), x_name,
                         static_cast<long long>(cache.batch), static_cast<long long>(cache.dim));
  if (start_pos < 0 || start_pos > cache.seq - x.seq)
    return Status::error(Code::kInvalidArgument,
                         "start_pos: expected 0 <= start_pos and start_pos + %lld (the %s length) <= "
                         "%lld (the %s length), got start_pos = %lld",
                         static_cast<long long>(x.seq), x_name, static_cast<long long>(cache.seq), name,
                         static_cast<long long>(start_pos));
  return Status::ok();
}

inline float stored(float x, float) { return x; }
inline Half stored(float x, Half) { return to_half(x); }

}  // namespace

template <class C>
Status update_cache(const ConstHeads& value, const Heads<C>& cache, int64_t start_pos) {
  SPEC_EDGE_RETURN_IF_ERROR(check_heads(value, "value"));
  SPEC_EDGE_RETURN_IF_ERROR(check_cache(cache, value, start_pos, "cache", "value"));
  if (cache.heads != value.heads)
    return Status::error(Code::kInvalidArgument, "cache: expected %lld heads (those of value), got %lld",
                         static_cast<long long>(value.heads), static_cast<long long>(cache.heads));
  for (int64_t b = 0; b < value.batch; ++b)
    for (int64_t i = 0; i < value.seq; ++i)
      for (int64_t h = 0; h < value.heads; ++h) {
        const float* src = value.at(b, i, h);
        C* dst = cache.at(b, start_pos + i, h);
        for (int64_t d = 0; d < value.dim; ++d) dst[d] = stored(src[d], C{});
      }
  return Status::ok();
}

template <class C>
Status attention(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache,
                 int64_t start_pos, const Heads<float>& out) {
  return attention(q, k_cache, v_cache, start_pos, out, 0, q.heads);
}

template <class C>
Status attention(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache,
                 int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end) {
  SPEC_EDGE_RETURN_IF_ERROR(check_heads(q, "q"));
  SPEC_EDGE_RETURN_IF_ERROR(check_cache(k_cache, q, start_pos, "k_cache", "q"));
  SPEC_EDGE_RETURN_IF_ERROR(check_cache(v_cache, q, start_pos, "v_cache", "q"));
  if (v_cache.seq != k_cache.seq || v_cache.heads != k_cache.heads)
    return Status::error(Code::kInvalidArgument, "v_cache: expected the shape of k_cache");
  if (q.heads % k_cache.heads != 0)
    return Status::error(Code::kInvalidArgument,
                         "k_cache: expected a number of heads that divides q's %lld, got %lld",
                         static_cast<long long>(q.heads), static_cast<long long>(k_cache.heads));
  if (out.batch != q.batch || out.seq != q.seq || out.heads != q.heads || out.dim != q.dim)
    return Status::error(Code::kInvalidArgument, "out: expected the shape of q");
  if (head_begin < 0 || head_begin > head_end || head_end > q.heads)
    return Status::error(Code::kInvalidArgument,
                         "head_begin, head_end: expected 0 <= head_begin <= head_end <= %lld (q's heads), "
                         "got %lld, %lld",
                         static_cast<long long>(q.heads), static_cast<long long>(head_begin),
                         static_cast<long long>(head_end));
  attention_kernel<C>()(q, k_cache, v_cache, start_pos, out, head_begin, head_end);
  return Status::ok();
}

template Status update_cache(const ConstHeads&, const Heads<float>&, int64_t);
template Status update_cache(const ConstHeads&, const Heads<Half>&, int64_t);
template Status attention(const ConstHeads&, const ConstHeads&, const ConstHeads&, int64_t, const Heads<float>&);
template Status attention(const ConstHeads&, const ConstHalfHeads&, const ConstHalfHeads&, int64_t,
                          const Heads<float>&);
template Status attention(const ConstHeads&, const ConstHeads&, const ConstHeads&, int64_t, const Heads<float>&,
                          int64_t, int64_t);
template Status attention(const ConstHeads&, const ConstHalfHeads&, const ConstHalfHeads&, int64_t,
                          const Heads<float>&, int64_t, int64_t);

// The baseline build of the kernel (SSE2 on x86-64, NEON on aarch64).
const AttendKernels& attend_baseline() {
  static const AttendKernels kernels{attend<float>, attend<Half>};
  return kernels;
}

}  // namespace spec_edge
