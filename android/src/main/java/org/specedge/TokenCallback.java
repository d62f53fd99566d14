package org.specedge;

/**
 * Receives generated tokens as soon as each speculative round decides them (one to K+1 tokens per
 * call), on the thread that called {@code generate}.
 *
 * <p>An exception thrown here ends the generate call and propagates out of it; the runner stays
 * usable. Call {@link SpeculativeRunner#stop()} from here to end generation after this round.
 */
@FunctionalInterface
public interface TokenCallback {
  /**
   * @param tokens the token ids decided by this round
   * @param text their text, for {@link SpeculativeRunner#generateText}: complete characters only
   *     (a character split across rounds arrives with the round that completes it); {@code null}
   *     when generating from token ids
   */
  void onTokens(long[] tokens, String text);
}
