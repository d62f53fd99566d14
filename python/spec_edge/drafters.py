"""Where a round's proposals come from, and how many it makes. ``drafter="model"``: the draft
model; ``"lookup"``: :class:`PromptLookup`, the tokens that followed the most recent earlier
occurrence of the last n tokens (prompt-lookup decoding), for work whose output repeats its input
(editing code, rewriting a document, answering from retrieved text); ``"hybrid"``: lookup when its
exact match is at least ``min_match`` tokens long, the draft model otherwise, until its drafts end
with such a match, or with an edit after one, and lookup completes the round's proposal.
:class:`AdaptiveK` picks each round's K from the rounds before.

Proposals are verified as any are: greedily by the tokens, sampled through the exact rule for a
point-mass draft (a draft row of -inf but at the proposed token), so the output is distributed as
the target's alone, whatever the drafter and K. The C++ runner's runtime_demo/runner/include/spec_edge/
drafting.h is the same, decision for decision: a seed gives the same tokens on both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Real

from .manifest import ROUND

DRAFTERS = ("model", "lookup", "hybrid")
MAX_NGRAM: int = ROUND["max_ngram_limit"]
_DEFAULTS = ROUND["drafting_defaults"]  # program_format.json's, the C++ runner's too


@dataclass(frozen=True)
class Drafting:
    """The drafter's settings (those of ``spec-edge-run --drafter ...``). Adaptive K's costs are
    in target decode steps: one draft-model step, and the verify step's with 1, 2, ... proposals
    (``verify_costs``, as ``NativeRunner.measure_step_costs`` or ``spec-edge-run --calibrate``
    measure them on the device: real kernels cost in steps of rows, not per row), else 1 +
    ``verify_row_cost`` per proposal. Fixed settings, not timings, so that K follows from the
    tokens alone and a seed gives the same tokens anywhere."""

    drafter: str = "model"
    min_ngram: int = _DEFAULTS["min_ngram"]  # prompt lookup's n-gram lengths, longest tried first
    max_ngram: int = _DEFAULTS["max_ngram"]
    min_match: int = _DEFAULTS["min_match"]  # hybrid: lookup serves a round when its n-gram is this long
    adaptive_k: bool = False  # K per round from the rounds before, up to the decoder's k
    draft_step_cost: float = _DEFAULTS["draft_step_cost"]
    verify_row_cost: float = _DEFAULTS["verify_row_cost"]
    verify_costs: tuple[float, ...] = ()

    def __post_init__(self):
        costs = self.verify_costs
        if not (isinstance(costs, Sequence) and not isinstance(costs, (str, bytes))
                and all(isinstance(c, Real) for c in costs)):
            raise TypeError(f"verify_costs: expected a sequence of numbers, got {costs!r}")
        object.__setattr__(self, "verify_costs", tuple(float(c) for c in costs))

    def check(self, k: int | None = None) -> None:
        """ValueError naming the setting out of range (the C++ runner's messages); with ``k``,
        the runner's K, also a ``verify_costs`` too short for it."""
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter: expected one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        if not 1 <= self.min_ngram <= self.max_ngram <= MAX_NGRAM:
            raise ValueError(f"min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram <= {MAX_NGRAM}, got "
                             f"{self.min_ngram}, {self.max_ngram}")
        if self.drafter == "hybrid" and not self.min_ngram <= self.min_match <= self.max_ngram:
            raise ValueError(f"min_match: expected min_ngram <= min_match <= max_ngram ({self.min_ngram}.."
                             f"{self.max_ngram}), got {self.min_match}")
        for name in ("draft_step_cost", "verify_row_cost"):
            cost = getattr(self, name)
            if not 0 <= cost <= 1e6:  # NaN fails too
                raise ValueError(f"{name}: expected a cost in [0, 1e6] target decode steps, got {cost}")
        for cost in self.verify_costs:
            if not 0 < cost <= 1e6:
                raise ValueError(f"verify_costs: expected costs in (0, 1e6] target decode steps, got {cost}")
        if k is not None and self.verify_costs and len(self.verify_costs) < k:
            raise ValueError(f"verify_costs: expected a cost for each K in 1..{k} (k={k}), "
                             f"got {len(self.verify_costs)}")

    def round_costs(self, k_max: int, model_drafts: bool) -> list[float]:
        """A round's cost in target decode steps with k = 1..``k_max`` proposals, what adaptive K
        weighs: the verify step's, plus k draft-model steps where the model drafts."""
        costs = []
        for k in range(1, k_max + 1):
            verify = 1.0 + self.verify_row_cost * k if not self.verify_costs else self.verify_costs[k - 1]
            costs.append(verify + self.draft_step_cost * k if model_drafts else verify)
        return costs


class AdaptiveK:
    """The K in 1..``k_max`` that maximises the expected tokens per unit of time, E(K) / T(K) with
    E(K) = 1 + a + ... + a^K (an accepted prefix, then one token from the target, when each
    proposal is accepted with probability a) and T(K) = ``costs[K - 1]`` (``Drafting.round_costs``),
    where a is estimated from the rounds so far, each round's evidence decayed by ``DECAY`` per
    later round, from a prior of one acceptance and one rejection. K depends on past rounds only, never on the
    current round's draws, so the output's distribution is unchanged. The arithmetic is the C++
    runner's, operation for operation: the same K in both."""

    DECAY: float = ROUND["adaptive_k_decay"]

    def __init__(self, costs: list[float]):
        self.costs = list(costs)
        self._accepted, self._rejected = 1.0, 1.0

    def next(self) -> int:
        a = self._accepted / (self._accepted + self._rejected)
        best, best_rate, expected, power = 1, 0.0, 1.0, 1.0
        for k, cost in enumerate(self.costs, start=1):
            power = power * a
            expected = expected + power
            rate = expected / cost
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def record(self, proposed: int, accepted: int) -> None:
        """A round that proposed ``proposed`` tokens and had ``accepted`` of them accepted."""
        self._accepted = self._accepted * self.DECAY + accepted
        self._rejected = self._rejected * self.DECAY + (1.0 if accepted < proposed else 0.0)


@dataclass
class Proposal:
    ngram: int = 0  # the length of the matched n-gram (0: no match)
    tokens: list[int] = field(default_factory=list)


class PromptLookup:
    """An index of the text's n-grams (``min_ngram`` <= n <= ``max_ngram``) by their two most
    recent last positions, updated as tokens arrive: a lookup is at most two dict probes per n,
    whatever the length of the text."""

    def __init__(self, min_ngram: int, max_ngram: int):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, "
                             f"{max_ngram}")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> its last two end positions (-1: none)

    def clear(self) -> None:
        self.tokens.clear()
        self._index.clear()

    def extend(self, tokens) -> None:
        for token in tokens:
            self.append(int(token))

    def append(self, token: int) -> None:
        """The newest token. The n-grams ending one token earlier join the index now, so that a
        lookup of the last n tokens finds an earlier occurrence, never the last n tokens themselves."""
        self.tokens.append(token)
        end = len(self.tokens) - 2
        for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
            ngram = tuple(self.tokens[end - n + 1:end + 1])
            self._index[ngram] = (end, self._index.get(ngram, (-1,))[0])

    def propose(self, k: int, after=(), resume: bool = True) -> Proposal:
        """Up to ``k`` tokens that followed the most recent earlier occurrence of the last n
        tokens, for the largest n that has one. Where no n-gram of at least ``min_ngram`` tokens
        recurs, the text may have been edited: the last token took the place of the one that
        followed the n tokens before it (a renamed word), and the proposal is what came after
        the replaced token at their most recent earlier occurrence, again for the largest n (only
        with ``resume``). None when neither finds one. ``after``: tokens not yet in the text (a
        draft model's proposals) that the last tokens end with; the occurrence and what followed
        it are still the text's."""
        size = len(self.tokens)
        last = size + len(after) - 1
        # the last max_ngram + 1 tokens of the text and `after`, without copying the whole text
        tail = (self.tokens[max(0, size - self.max_ngram - 1):] + list(after))[-(self.max_ngram + 1):]
        # skip 0: the last n tokens recur; skip 1: the n before the last one do (an edit)
        for skip in (0, 1) if resume else (0,):
            end_at = last - skip  # the n-gram's last position, in the text and `after`
            for n in range(min(self.max_ngram, end_at), self.min_ngram - 1, -1):
                ngram = tuple(tail[len(tail) - skip - n:len(tail) - skip])
                latest, previous = self._index.get(ngram, (-1, -1))
                end = latest if latest < end_at else previous  # an earlier occurrence, not this one
                start = end + 1 + skip
                if end >= 0 and start < size:
                    return Proposal(n, self.tokens[start:min(start + k, size)])
        return Proposal()
