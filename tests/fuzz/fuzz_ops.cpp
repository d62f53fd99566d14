// libFuzzer target over the core's entry points: random shapes, strides (broadcast and padded
// rows), dtypes (supported or not), tokens, uniforms, parameters and values (NaN, +-inf,
// denormals, huge, negative). Every call must return (no crash, no sanitizer report), and every
// CPU path must return the same status, message and outputs.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "spec_edge/attention.h"
#include "spec_edge/dispatch.h"
#include "spec_edge/ops.h"

using namespace spec_edge;

namespace {

struct Reader {
  const uint8_t* data;
  size_t size, at = 0;
  uint8_t u8() { return at < size ? data[at++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  float value() {
    switch (u8() % 12) {
      case 0: return std::numeric_limits<float>::quiet_NaN();
      case 1: return std::numeric_limits<float>::infinity();
      case 2: return -std::numeric_limits<float>::infinity();
      case 3: return 0.0f;
      case 4: return -0.0f;
      case 5: return std::numeric_limits<float>::denorm_min() * (1 + u8());
      case 6: return std::numeric_limits<float>::max() / (1 + u8());
      case 7: return -static_cast<float>(u8()) / 16.0f;
      default: return static_cast<float>(u16()) / 4096.0f;
    }
  }
};

struct Storage {
  std::vector<uint8_t> bytes;  // element storage for any dtype
  Rows rows;
};

// A [B, R, V] score tensor with optional broadcast batch and padded rows.
Storage make_rows(Reader& in, DType dtype, int64_t B, int64_t R, int64_t V) {
  Storage s;
  const bool broadcast = in.u8() % 4 == 0;
  const int64_t row_stride = V + (in.u8() % 3 == 0 ? in.u8() % 5 : 0);
  const int64_t batch_stride = broadcast ? 0 : R * row_stride;
  const int64_t elems = (broadcast ? 1 : B) * R * row_stride + 1;
  const size_t width = dtype == DType::kFloat32 ? 4 : dtype == DType::kFloat64 ? 8 : 2;
  s.bytes.resize(static_cast<size_t>(elems) * width);
  for (int64_t j = 0; j < elems; ++j) {
    const float v = in.value();
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (width == 4) std::memcpy(&s.bytes[j * 4], &v, 4);
    else if (width == 8) { const double d = v; std::memcpy(&s.bytes[j * 8], &d, 8); }
    else { const uint16_t h = static_cast<uint16_t>(dtype == DType::kBFloat16 ? bits >> 16 : in.u16()); std::memcpy(&s.bytes[j * 2], &h, 2); }
  }
  s.rows.data = s.bytes.data();
  s.rows.dtype = dtype;
  s.rows.batch = B;
  s.rows.rows = R;
  s.rows.vocab = V;
  s.rows.batch_stride = batch_stride;
  s.rows.row_stride = row_stride;
  return s;
}

// Every stored row of a [B, K+1, V] tensor as [rows, 1, V] (broadcast storage holds one batch
// entry), for the ops over single rows.
Rows flat_rows(const Storage& s, int64_t B, int64_t K) {
  Rows rows = s.rows;
  rows.batch = (s.rows.batch_stride == 0 ? (B > 0 ? 1 : 0) : B) * (K + 1);
  rows.batch_stride = rows.row_stride;
  rows.rows = 1;
  return rows;
}

uint32_t float_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits;
}

}  // namespace

// Attention over a KV cache: random shapes (some invalid), positions and values, padded strides.
int fuzz_attention(Reader& in) {
  const int64_t B = in.u8() % 3, S = in.u8() % 5, Hkv = in.u8() % 4, group = 1 + in.u8() % 2, D = in.u8() % 41,
                C = in.u8() % 13, start = static_cast<int64_t>(in.u8() % 16) - 2, pad = in.u8() % 3;
  const int64_t Hq = Hkv * group + (in.u8() % 8 == 0 ? 1 : 0);  // sometimes not a multiple
  std::vector<float> q(B * S * Hq * (D + pad) + 1), k(B * C * Hkv * (D + pad) + 1), v(k.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = in.value();
  const ConstHeads qv{q.data(), B, S, Hq, D, S * Hq * (D + pad), Hq * (D + pad), D + pad};
  const ConstHeads kv{k.data(), B, C, Hkv, D, C * Hkv * (D + pad), Hkv * (D + pad), D + pad};
  const ConstHeads vv{v.data(), B, C, Hkv, D, C * Hkv * (D + pad), Hkv * (D + pad), D + pad};
  // The same caches in float16 (as update_cache rounds them), read by every path too.
  std::vector<Half> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = to_half(k[i]), v16[i] = to_half(v[i]);
  const ConstHalfHeads kh{k16.data(), B, C, Hkv, D, C * Hkv * (D + pad), Hkv * (D + pad), D + pad};
  const ConstHalfHeads vh{v16.data(), B, C, Hkv, D, C * Hkv * (D + pad), Hkv * (D + pad), D + pad};
  const Heads<float> no_out{nullptr, B, S, Hq, D, S * Hq * (D + pad), Hq * (D + pad), D + pad};
  for (const bool half : {false, true}) {
    std::string first;
    for (const char* const* isa = available_isa_list(); *isa; ++isa) {
      if (!select_isa(*isa).is_ok()) continue;
      std::vector<float> out(q.size(), -9.0f);
      Heads<float> o = no_out;
      o.data = out.data();
      const Status s = half ? attention(qv, kh, vh, start, o) : attention(qv, kv, vv, start, o);
      std::string result = std::to_string(static_cast<int>(s.code())) + s.message();
      for (float x : out) result += " " + std::to_string(float_bits(x));
      if (first.empty()) first = result;
      else if (result != first) __builtin_trap();  // a path disagrees with the first one
    }
  }
  std::vector<float> cache(B * C * Hq * (D + pad) + 1);
  (void)update_cache(qv, Heads<float>{cache.data(), B, C, Hq, D, C * Hq * (D + pad), Hq * (D + pad), D + pad}, start);
  std::vector<Half> cache16(cache.size());
  (void)update_cache(qv, Heads<Half>{cache16.data(), B, C, Hq, D, C * Hq * (D + pad), Hq * (D + pad), D + pad}, start);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const int op = in.u8() % 7;
  if (op == 6) return fuzz_attention(in);
  const DType dtype = static_cast<DType>(in.u8() % 4);
  const int64_t B = in.u8() % 4, K = in.u8() % 6, V = 1 + in.u16() % 300;
  const int64_t RD = in.u8() % 8 == 0 ? K + 1 : K;  // sometimes a wrong draft row count
  Storage target = make_rows(in, dtype, B, K + 1, V);
  Storage draft = make_rows(in, in.u8() % 8 == 0 ? DType::kFloat16 : dtype, B, RD, V);
  std::vector<int64_t> tokens(B * K + 1), num_draft(B + 1), out(B * (K + 1) + 1), len(B + 1);
  for (auto& t : tokens) t = in.u8() % 16 == 0 ? static_cast<int64_t>(in.u8()) - 128 : in.u16() % V;
  for (auto& n : num_draft) n = static_cast<int64_t>(in.u8() % (K + 3)) - 1;
  std::vector<double> u((B + 1) * (K + 1));
  for (auto& x : u) x = in.u8() % 32 == 0 ? static_cast<double>(in.value()) : in.u32() * 0x1p-32;
  std::vector<float> temperature(B + 1);
  for (auto& t : temperature) t = in.u8() % 4 == 0 ? in.value() : static_cast<float>(in.u8()) / 64.0f;
  const int64_t seed = in.u32(), offset = in.u32();
  const int64_t temperature_count = in.u8() % 2 ? 1 : B;
  const int64_t* draft_lengths = in.u8() % 2 ? num_draft.data() : nullptr;
  const Tokens t{tokens.data(), B, K, K, 1};
  const Uniforms uv{u.data(), DType::kFloat64, B, K + 1, K + 1, 1};
  // Filters: each absent, one value or one per row, in or out of range; prev_tokens with
  // padding, repeats and bad ids.
  std::vector<int64_t> top_k(B + 1), prev(1 + in.u8() % 12);
  std::vector<float> top_p(B + 1), min_p(B + 1), penalty(B + 1);
  for (auto& k : top_k) k = in.u8() % 8 == 0 ? static_cast<int64_t>(in.u16()) - 100 : in.u8() % (V + 1);
  for (auto& p : top_p) p = in.u8() % 4 == 0 ? in.value() : static_cast<float>(1 + in.u8()) / 256.0f;
  for (auto& p : min_p) p = in.u8() % 4 == 0 ? in.value() : static_cast<float>(in.u8()) / 512.0f;
  for (auto& p : penalty) p = in.u8() % 4 == 0 ? in.value() : 0.5f + static_cast<float>(in.u8()) / 128.0f;
  for (auto& id : prev) id = in.u8() % 16 == 0 ? static_cast<int64_t>(in.u8()) - 128 : static_cast<int64_t>(in.u16() % (V + 1)) - 1;
  Filters filters;
  const auto count = [&](uint8_t c) -> int64_t { return c % 3 == 0 ? 0 : c % 3 == 1 ? 1 : B; };
  filters.top_k = {top_k.data(), count(in.u8())};
  filters.top_p = {top_p.data(), count(in.u8())};
  filters.min_p = {min_p.data(), count(in.u8())};
  filters.repetition_penalty = {penalty.data(), count(in.u8())};
  if (in.u8() % 2) filters.prev_tokens = Tokens{prev.data(), 1, static_cast<int64_t>(prev.size()), 0, 1};
  std::vector<float> filtered(static_cast<size_t>(B * (K + 1) * V) + 1);

  std::string first;
  for (const char* const* isa = available_isa_list(); *isa; ++isa) {
    if (!select_isa(*isa).is_ok()) continue;
    std::vector<int64_t> n(B + 1, -9), next(B + 1, -9);
    std::fill(out.begin(), out.end(), -9);
    Status s;
    switch (op) {
      case 0: s = verify_greedy(target.rows, t, {n.data(), next.data()}); break;
      case 1: s = accept(target.rows, &draft.rows, t, uv, {n.data(), next.data()}); break;
      case 2: s = accept(target.rows, nullptr, t, uv, {n.data(), next.data()}); break;
      case 3: {
        SampleParams params;
        params.temperature = {temperature.data(), temperature_count};
        params.seed = {&seed, 1};
        params.offset = {&offset, 1};
        params.filters = filters;
        s = sample(flat_rows(target, B, K), params, out.data());
        break;
      }
      case 5: {
        std::fill(filtered.begin(), filtered.end(), -9.0f);
        s = filter_logits(flat_rows(target, B, K), {temperature.data(), temperature_count}, filters,
                          filtered.data(), V);
        uint64_t hash = 1469598103934665603ull;  // FNV-1a over the output bits
        if (s.is_ok())
          for (float v : filtered) hash = (hash ^ float_bits(v)) * 1099511628211ull;
        out[0] = static_cast<int64_t>(hash >> 1);
        break;
      }
      default: {
        VerifyParams params;
        params.temperature = {temperature.data(), temperature_count};
        params.seed = {&seed, 1};
        params.offset = {&offset, 1};
        params.num_draft = draft_lengths;
        params.filters = filters;
        s = verify(target.rows, draft.rows, t, params, {len.data(), out.data(), K + 1});
      }
    }
    std::string result = std::to_string(static_cast<int>(s.code())) + s.message();
    if (s.is_ok())
      for (int64_t b = 0; b < B; ++b)
        result += " " + std::to_string(n[b]) + ":" + std::to_string(next[b]) + ":" + std::to_string(len[b]);
    for (int64_t v : out) result += " " + std::to_string(v);
    if (first.empty()) first = result;
    else if (result != first) __builtin_trap();  // a path disagrees with the first one
  }
  return 0;
}
