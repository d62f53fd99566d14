"""Where a round's proposals come from, and how many it makes. ``drafter="model"``: the draft
model; ``"lookup"``: :class:`PromptLookup`, the tokens that followed the most recent earlier
occurrence of the last n tokens (prompt-lookup decoding), followed as a copy that learns the
edits the output makes to what it copies, for work whose output repeats its input (editing code,
rewriting a document, answering from retrieved text); ``"hybrid"``: lookup when its
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
_Copy = tuple[int, tuple[int, ...], int | None]  # PromptLookup's copy: position, pending tokens, rewrite
MAX_NGRAM: int = ROUND["max_ngram_limit"]
MAX_REWRITE: int = ROUND["max_rewrite_tokens"]  # prompt lookup's rewrites: the most tokens on either side
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

    def check(self, k: int | None = None, max_k: int | None = None) -> None:
        """ValueError naming the setting out of range (the C++ runner's messages); with ``k``
        and ``max_k``, the runner's K and the programs' most, also ``verify_costs`` of other
        than k..max_k values (``--calibrate`` gives max_k, for every K the programs verify)."""
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
        if k is not None and self.verify_costs and not k <= len(self.verify_costs) <= max_k:
            raise ValueError(f"verify_costs: expected a cost for each K in 1..{k} (k={k}), and at most one for each "
                             f"K the programs verify ({max_k}), got {len(self.verify_costs)}")

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
    ngram: int = 0  # how many of the last tokens the proposal's source matches (0: none, or a guess past an edit)
    tokens: list[int] = field(default_factory=list)


class PromptLookup:
    """An index of the text's n-grams (``min_ngram`` <= n <= ``max_ngram``) by their two most
    recent last positions, updated as tokens arrive: a lookup is at most two dict probes per n,
    whatever the length of the text.

    The text is also followed as a copy. Once its last n tokens recur, the next token is expected
    to be the one that followed them, and so on while the text keeps copying. Where it leaves the
    copy (an edit), the copy is taken to advance with the text (a replaced token) until the text
    copies again from near where it left, at most ``MAX_REWRITE`` tokens on: what the edit
    replaced and what took its place are then a rewrite, applied wherever the copy meets the
    replaced tokens again (a renamed name's next use) and forgotten when the text does not follow
    it. Proposals continue the copy; where there is none, the lookup's."""

    def __init__(self, min_ngram: int, max_ngram: int):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, "
                             f"{max_ngram}")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> its last two end positions (-1: none)
        self.clear()

    def clear(self) -> None:
        self.tokens.clear()
        self._index.clear()
        # the copy: the position of the token expected next (-1: none), a rewrite's tokens
        # expected before it, and that rewrite's key (its first replaced token; None: none)
        self._copy: _Copy = (-1, (), None)
        self._matched = 0  # tokens in a row that followed the copy
        self._run = (0, 0)  # the copy's and the text's positions where that run began
        self._edit: tuple[int, int] | None = None  # the same where the text left the copy, until it copies again
        self._rewrites: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # key -> (replaced, replacement)

    def extend(self, tokens) -> None:
        for token in tokens:
            self.append(int(token))

    def append(self, token: int) -> None:
        """The newest token. The n-grams ending one token earlier join the index now, so that a
        lookup of the last n tokens finds an earlier occurrence, never the last n tokens themselves."""
        expected = self._next(self._copy)
        self.tokens.append(token)
        end = len(self.tokens) - 2
        for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
            ngram = tuple(self.tokens[end - n + 1:end + 1])
            self._index[ngram] = (end, self._index.get(ngram, (-1,))[0])
        self._follow(token, expected)

    def propose(self, k: int, after=(), resume: bool = True) -> Proposal:
        """Up to ``k`` tokens: the copy's continuation where the text follows one (with
        ``resume``, also a guess past an edit), else what followed the most recent earlier
        occurrence of the last n tokens, for the largest n that has one. Where no n-gram of at
        least ``min_ngram`` tokens recurs, the text may have been edited: the last token took the
        place of the one that followed the n tokens before it (a renamed word), and the proposal is
        what came after the replaced token at their most recent earlier occurrence, again for the
        largest n (only with ``resume``). None when neither finds one. ``after``: tokens not yet in
        the text (a draft model's proposals) that the last tokens end with; the occurrence and what
        followed it are still the text's."""
        copy, matched = self._copy, self._matched
        for token in after:
            step = self._next(copy)
            copy, matched = (step[1], matched + 1) if step is not None and step[0] == token else (None, 0)
            if copy is None:
                break
        # a guess past an edit while it is the last token (with resume) or the text follows it
        just_edited = self._edit is not None and self._edit[1] == len(self.tokens) - 1
        if copy is not None and (matched > 0 or (resume and just_edited)):
            tokens = []
            while len(tokens) < k and (step := self._next(copy)) is not None:
                tokens.append(step[0])
                copy = step[1]
            if tokens:
                return Proposal(matched, tokens)
        size = len(self.tokens)
        last = size + len(after) - 1
        # the last max_ngram + 1 tokens of the text and `after`, without copying the whole text
        tail = (self.tokens[max(0, size - self.max_ngram - 1):] + list(after))[-(self.max_ngram + 1):]
        # skip 0: the last n tokens recur; skip 1: the n before the last one do (an edit)
        for skip in (0, 1) if resume else (0,):
            end_at = last - skip  # the n-gram's last position, in the text and `after`
            for n in range(min(self.max_ngram, end_at), self.min_ngram - 1, -1):
                end, _ = self._earlier(tuple(tail[len(tail) - skip - n:len(tail) - skip]), end_at)
                start = end + 1 + skip
                if end >= 0 and start < size:
                    return Proposal(n, self.tokens[start:min(start + k, size)])
        return Proposal()

    def _earlier(self, ngram: tuple[int, ...], before: int) -> tuple[int, int]:
        """Where ``ngram`` last ended before position ``before``, and once more before that (-1:
        none): an occurrence earlier than the one being looked up."""
        latest, previous = self._index.get(ngram, (-1, -1))
        return (latest, previous) if latest < before else (previous, -1)

    def _next(self, copy: _Copy):
        """The token the copy expects next, the copy after it and the rewrite it comes from
        (None: not one); None where the copy has none."""
        at, pending, key = copy
        if pending:
            return pending[0], (at, pending[1:], key if len(pending) > 1 else None), key
        if not 0 <= at < len(self.tokens):
            return None
        first = self.tokens[at]
        rewrite = self._rewrites.get(first)
        if rewrite is not None and tuple(self.tokens[at:at + len(rewrite[0])]) == rewrite[0]:
            old, new = rewrite
            return new[0], (at + len(old), new[1:], first if len(new) > 1 else None), first
        return first, (at + 1, (), None), None

    def _follow(self, token: int, expected) -> None:
        """Moves the copy past the newest token, at the end of the text: ``expected`` is what the
        copy expected of it (``_next``)."""
        at = len(self.tokens) - 1
        if expected is not None and expected[0] == token:
            if self._matched == 0:
                self._run = (self._copy[0], at)
            self._copy, self._matched = expected[1], self._matched + 1
            if self._edit is not None and self._matched >= self.min_ngram:
                self._learn(*self._run)
            return
        if expected is not None:
            if expected[2] is not None:
                self._rewrites.pop(expected[2], None)  # the text did not follow it
            if self._edit is None:
                self._edit = (self._copy[0], at)
        self._matched = 0
        for n in range(min(self.max_ngram, at), self.min_ngram - 1, -1):
            latest, previous = self._earlier(tuple(self.tokens[at - n + 1:]), at)
            if latest < 0:
                continue
            end = latest
            if self._edit is not None:
                near = [e for e in (latest, previous) if e >= 0 and 0 <= e - n + 1 - self._edit[0] <= MAX_REWRITE]
                if near:
                    end = near[0]
                    self._learn(end - n + 1, at - n + 1)
                self._edit = None
            self._copy, self._matched = (end + 1, (), None), n
            return
        # No n-gram recurs: past an edit the copy advances with the text, as if a token was
        # replaced, while the text may still copy again (a run of min_ngram tokens, the earliest
        # from the next token on) within MAX_REWRITE tokens of where it left.
        if self._edit is not None and at + 2 - self.min_ngram - self._edit[1] <= MAX_REWRITE:
            self._copy = (self._copy[0] + 1, (), None)
        else:
            self._copy, self._edit = (-1, (), None), None

    def _learn(self, source: int, text: int) -> None:
        """The edit ends where the text copies again, from ``source`` at ``text``: what it
        replaced, and what took its place, become a rewrite."""
        (edit_source, edit_text), self._edit = self._edit, None
        old, new = tuple(self.tokens[edit_source:source]), tuple(self.tokens[edit_text:text])
        if 0 < len(old) <= MAX_REWRITE and 0 < len(new) <= MAX_REWRITE:
            self._rewrites[old[0]] = (old, new)
