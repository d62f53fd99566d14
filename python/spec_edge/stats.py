"""The statistics of one generate call, shared by every loop."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class GenerationStats:
    """What one ``generate`` call did, and where the time went: one type for every loop (the C++
    runner's ``GenerationStats`` and the Java API's have the same fields). A loop fills what it
    measures; the callback loop (:class:`SpeculativeDecoder`) keeps no times."""

    new_tokens: int = 0
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    accepted_histogram: list[int] = field(default_factory=list)  # verify rounds by accepted length 0..K
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    target_seconds: float = 0.0  # target verify (or decode) steps, the fused op included
    total_seconds: float = 0.0
    # By drafter: verify rounds served, tokens proposed and accepted; plain_steps: rounds in which
    # prompt lookup had no proposal, decoded by the target alone (one token each).
    model_rounds: int = 0
    model_proposed: int = 0
    model_accepted: int = 0
    lookup_rounds: int = 0
    lookup_proposed: int = 0
    lookup_accepted: int = 0
    plain_steps: int = 0

    @property
    def tokens_per_second(self) -> float:
        decode_s = self.total_seconds - self.prefill_seconds
        return self.new_tokens / decode_s if decode_s > 0 else 0.0

    @property
    def tokens_per_round(self) -> float:
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    def add(self, other: GenerationStats) -> None:
        """Adds ``other``'s counts, times and (when both keep one) histogram to these: totals over calls."""
        for f in fields(self):
            if f.name != "accepted_histogram":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        if self.accepted_histogram and other.accepted_histogram:
            self.accepted_histogram = [a + b for a, b in zip(self.accepted_histogram, other.accepted_histogram)]
