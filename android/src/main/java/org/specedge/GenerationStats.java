package org.specedge;

import java.util.Arrays;

/** What the last generate call did, and where its time went. */
public final class GenerationStats {
  /** Tokens generated. */
  public final long newTokens;
  /** Speculative rounds (draft K tokens, verify them in one target step). */
  public final long rounds;
  /** Draft tokens proposed and accepted, over all rounds. */
  public final long proposed, accepted;
  /** Rounds by accepted length 0..K. */
  private final long[] acceptedHistogram;
  /** Seconds: prefill of both programs, draft steps, target steps (verify), the whole call. */
  public final double prefillSeconds, draftSeconds, targetSeconds, totalSeconds;
  /** By drafter: verify rounds served, tokens proposed and accepted. */
  public final long modelRounds, modelProposed, modelAccepted, lookupRounds, lookupProposed, lookupAccepted;
  /** Rounds in which prompt lookup had no proposal, decoded by the target alone (one token each). */
  public final long plainSteps;

  GenerationStats(long newTokens, long rounds, long proposed, long accepted, long[] acceptedHistogram,
      double prefillSeconds, double draftSeconds, double targetSeconds, double totalSeconds, long[] byDrafter) {
    this.newTokens = newTokens;
    this.rounds = rounds;
    this.proposed = proposed;
    this.accepted = accepted;
    this.acceptedHistogram = acceptedHistogram.clone();
    this.prefillSeconds = prefillSeconds;
    this.draftSeconds = draftSeconds;
    this.targetSeconds = targetSeconds;
    this.totalSeconds = totalSeconds;
    this.modelRounds = byDrafter[0];
    this.modelProposed = byDrafter[1];
    this.modelAccepted = byDrafter[2];
    this.lookupRounds = byDrafter[3];
    this.lookupProposed = byDrafter[4];
    this.lookupAccepted = byDrafter[5];
    this.plainSteps = byDrafter[6];
  }

  /** @return rounds by accepted length: element n counts the rounds that accepted n draft tokens */
  public long[] acceptedHistogram() {
    return acceptedHistogram.clone();
  }

  /** @return accepted draft tokens per proposed one */
  public double acceptanceRate() {
    return proposed == 0 ? 0.0 : (double) accepted / proposed;
  }

  /** @return generated tokens per second of decoding (prefill excluded) */
  public double tokensPerSecond() {
    double decode = totalSeconds - prefillSeconds;
    return decode > 0 ? newTokens / decode : 0.0;
  }

  @Override
  public String toString() {
    return String.format("%d tokens, %.1f tokens/s, acceptance %.3f over %d rounds, histogram %s",
        newTokens, tokensPerSecond(), acceptanceRate(), rounds, Arrays.toString(acceptedHistogram));
  }
}
