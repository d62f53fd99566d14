// spec_edge core ops: the one definition of each op's semantics (see docs/OPS.md).
//
// Every op takes a batch of independent sequences. Inputs are read-only views; outputs are
// caller-owned arrays. On error nothing is guaranteed about the outputs, and the status names
// the argument and what was expected. One rule for every op at every temperature: a row with
// no finite logit (every score -inf) is an error; an op reads a sequence's rows in order up to
// the one that decides it and checks each row it reads; rows after that one are neither read
// nor checked (the bytes an early rejection saves).
#pragma once

#include "spec_edge/status.h"
#include "spec_edge/types.h"

namespace spec_edge {

// verify_greedy(target [B, K+1, V], draft_tokens [B, K]) -> (n_accepted [B], next_token [B])
// Accepts t_i while t_i == argmax(target_i); emits argmax(target_n) at the first miss n (or
// n = K). Ties resolve to the lowest index. Rows past the first miss are not read. Scores may
// be probabilities or logits (NaN rejected, +-inf allowed, not every score -inf).
Status verify_greedy(const Rows& target, const Tokens& draft_tokens, VerifyResult out);

// accept(target_probs [B, K+1, V], draft_probs [B, K, V] or null, draft_tokens [B, K],
//        uniforms [B, K+1]) -> (n_accepted [B], next_token [B])
// Speculative sampling (Leviathan et al. 2023, Chen et al. 2023) on unnormalized rows:
// p_i = target_i / sum(target_i), q_i = draft_i / sum(draft_i). t_i is accepted iff
// u_i * q_i(t_i) <= p_i(t_i). At the first rejection n, the token is drawn from
// norm(max(0, p_n - q_n)) by inverse CDF with u_K; if all K are accepted, from p_K with u_K.
// draft_probs == null is the draft-free mode (q_i one-hot on t_i): accept with probability
// p_i(t_i), on rejection draw from p_i with t_i removed.
// Degenerate residual: if max(0, p_n - q_n) rounds to all zeros (p_n == q_n up to rounding),
// the token is drawn from p_n instead.
Status accept(const Rows& target_probs, const Rows* draft_probs, const Tokens& draft_tokens,
              const Uniforms& uniforms, VerifyResult out);

// The sampling filters of the transformers processor chain (docs/FILTERS.md), applied in its
// order: repetition penalty, temperature, top-k, top-p, min-p. Each parameter is absent
// (count 0), one value, or one value per batch row; a filter at its neutral value (top_k 0,
// top_p 1, min_p 0, penalty 1) is skipped. prev_tokens [B or 1, L] holds the ids seen so far
// (prompt included), -1 as padding; the penalty applies once per distinct id.
struct Filters {
  PerRow<int64_t> top_k;
  PerRow<float> top_p;
  PerRow<float> min_p;
  PerRow<float> repetition_penalty;
  Tokens prev_tokens;  // data == nullptr: none
};

// filter_logits(logits [B, V], temperature [1|B], filters) -> out [B, V] float32
// What the transformers chain hands to softmax: out[b, j] = pen(x[b, j]) / T for kept tokens and
// -inf for removed ones, where pen(x) = x * penalty if x < 0 else x / penalty for ids in
// prev_tokens (x otherwise). Kept: the tokens that survive top-k (every token tied with the k-th
// largest), top-p (a token is kept iff the mass of strictly larger scores is < top_p; ties are
// kept together) and min-p (the tokens strictly above the largest score whose probability is
// < min_p * max probability). temperature == 0 (greedy) keeps only the first argmax of pen(x),
// unscaled. Rows must hold no NaN or +inf and at least one finite logit, and pen(x) / T must
// not overflow float (sample and verify take such rows: they scale differences to the max).
Status filter_logits(const Rows& logits, PerRow<float> temperature, const Filters& filters,
                     float* out, int64_t out_stride);

// verify(target_logits [B, K+1, V], draft_logits [B, K, V], draft_tokens [B, K],
//        temperature [1|B], seed [1|B], offset [1|B], num_draft [B] or null)
//   -> accept_len [B], out [B, K+1]
// Row b uses n_b = num_draft[b] (default K) draft tokens. temperature == 0: greedy, exactly
// verify_greedy on the (penalized) target logits. temperature > 0: p = softmax(target / T),
// q = softmax(draft / T), computed as exp_nonpositive((x - max x) * (1/T)) (numerics.h; the
// normalization is the row mass), then exactly the rule of `accept`, with u_j the j-th Philox draw of
// stream (seed[b], offset[b], row b) (see philox.h). out[b] holds the accepted draft tokens,
// then the correction/bonus token, then -1 padding.
// Filters apply identically to target row i and draft row i, each restricted to its kept set
// and renormalized; the penalty of row i sees prev_tokens and the draft tokens before i.
struct VerifyParams {
  PerRow<float> temperature;
  PerRow<int64_t> seed;
  PerRow<int64_t> offset;
  const int64_t* num_draft = nullptr;  // [B] or null
  Filters filters;
};
struct VerifyOutput {
  int64_t* accept_len = nullptr;  // [B]
  int64_t* tokens = nullptr;      // [B, K+1], row stride `tokens_stride`
  int64_t tokens_stride = 0;
};
Status verify(const Rows& target_logits, const Rows& draft_logits, const Tokens& draft_tokens,
              const VerifyParams& params, VerifyOutput out);

// sample(logits [B, V], temperature [1|B], seed [1|B], offset [1|B]) -> tokens [B]
// temperature == 0: argmax (ties to the lowest index). temperature = T > 0: a token drawn from
// softmax(logits / T) -- the numerators exp_nonpositive((x - max) * (1/T)) of `verify` -- with
// draws 0, 1, ... of the Philox stream (seed[b], offset[b], row b): exactly, by rejection from
// exp_upper_bound's proposal read in one pass over the row (docs/OPS.md, "The seeded draw").
// Masked (-inf) logits are never drawn. Use offsets distinct from the ones given to `verify`.
// With filters, the token is drawn from the kept set of `filter_logits` by inverse CDF with
// draw 0.
struct SampleParams {
  PerRow<float> temperature;
  PerRow<int64_t> seed;
  PerRow<int64_t> offset;
  Filters filters;
};
Status sample(const Rows& logits, const SampleParams& params, int64_t* tokens);

// The checks sample and verify apply to one sequence's temperature and filters (prev_tokens
// aside) over a vocabulary of V, with their messages: for front ends that pass the settings to
// exported programs, so that a bad value is refused by name before any program runs.
// Exported from the libraries that hide the core (the runners link it through the kernels').
__attribute__((visibility("default"))) Status check_sampling_settings(int64_t vocab, float temperature,
                                                                      const Filters& filters);

}  // namespace spec_edge
