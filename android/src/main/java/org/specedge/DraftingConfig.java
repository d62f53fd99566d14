package org.specedge;

/**
 * Where each round's proposals come from, and how many it makes: the draft model (the default),
 * prompt lookup (the tokens that followed the last earlier occurrence of the last n tokens of
 * prompt and output, or, after an edit, of the n before the last one; no draft program needed),
 * or hybrid (lookup when its exact match is at least {@code minMatch} tokens long, the draft model
 * otherwise, until its drafts end with such a match or an edit after one and lookup completes the
 * round); K fixed or chosen per round from the rounds before, weighing the costs measured on the
 * device ({@link SpeculativeRunner#measureStepCosts}). Every choice keeps the output distributed
 * as the target's alone.
 *
 * <pre>{@code
 * DraftingConfig lookup = DraftingConfig.builder().drafter("lookup").adaptiveK(true).build();
 * }</pre>
 *
 * <p>Values are checked by the runner when loading: out of range, the constructor throws
 * {@link IllegalArgumentException} naming the setting.
 */
public final class DraftingConfig {
  /** "model", "lookup" or "hybrid". */
  public final String drafter;
  /** Prompt lookup's n-gram lengths, the longest tried first. */
  public final int minNgram, maxNgram;
  /** Hybrid: lookup serves a round when its n-gram is at least this long. */
  public final int minMatch;
  /** K per round from the rounds before, up to the runner's K. */
  public final boolean adaptiveK;
  /** Adaptive K's costs in target decode steps: a draft-model step, one more verify row. */
  public final double draftStepCost, verifyRowCost;
  // The verify step's cost with 1, 2, ... proposals; empty: 1 + verifyRowCost per proposal.
  private final double[] verifyCosts;

  private DraftingConfig(Builder b) {
    drafter = b.drafter;
    minNgram = b.minNgram;
    maxNgram = b.maxNgram;
    minMatch = b.minMatch;
    adaptiveK = b.adaptiveK;
    draftStepCost = b.draftStepCost;
    verifyRowCost = b.verifyRowCost;
    verifyCosts = b.verifyCosts.clone();
  }

  /**
   * @return the verify step's cost with 1, 2, ... proposals, in target decode steps, as
   *     measured on the device ({@code spec-edge-run --calibrate}); empty: 1 + {@link
   *     #verifyRowCost} per proposal
   */
  public double[] verifyCosts() {
    return verifyCosts.clone();
  }

  /** @return the draft model, K fixed: what {@code new SpeculativeRunner(dir)} uses */
  public static DraftingConfig model() {
    return builder().build();
  }

  /** @return a new builder, with the defaults of spec-edge-run */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds a {@link DraftingConfig}. */
  public static final class Builder {
    // The native runner's defaults: one definition, shared with the Python loop.
    private static final double[] DEFAULTS = SpeculativeRunner.nativeDraftingDefaults();

    private String drafter = "model";
    private int minNgram = (int) DEFAULTS[0], maxNgram = (int) DEFAULTS[1], minMatch = (int) DEFAULTS[2];
    private boolean adaptiveK = false;
    private double draftStepCost = DEFAULTS[3], verifyRowCost = DEFAULTS[4];
    private double[] verifyCosts = {};

    private Builder() {}

    /**
     * @param value "model", "lookup" or "hybrid"
     * @return this builder
     */
    public Builder drafter(String value) {
      drafter = value;
      return this;
    }

    /**
     * @param min shortest n-gram lookup matches
     * @param max longest
     * @return this builder
     */
    public Builder ngrams(int min, int max) {
      minNgram = min;
      maxNgram = max;
      return this;
    }

    /**
     * @param value hybrid: the shortest match lookup serves a round with
     * @return this builder
     */
    public Builder minMatch(int value) {
      minMatch = value;
      return this;
    }

    /**
     * @param value choose K per round from the rounds before
     * @return this builder
     */
    public Builder adaptiveK(boolean value) {
      adaptiveK = value;
      return this;
    }

    /**
     * @param draftStep one draft-model step, in target decode steps
     * @param verifyRow one more row of the verify step, in target decode steps
     * @return this builder
     */
    public Builder costs(double draftStep, double verifyRow) {
      draftStepCost = draftStep;
      verifyRowCost = verifyRow;
      return this;
    }

    /**
     * @param costs the verify step's cost with 1, 2, ... proposals (at least the runner's K of
     *     them), in target decode steps, as {@code spec-edge-run --calibrate} measures it on the
     *     device: real kernels cost in steps of rows, not per row
     * @return this builder
     */
    public Builder verifyCosts(double... costs) {
      if (costs == null) {
        throw new IllegalArgumentException("verifyCosts: expected an array of costs, got null");
      }
      verifyCosts = costs.clone();
      return this;
    }

    /** @return the configuration */
    public DraftingConfig build() {
      return new DraftingConfig(this);
    }
  }
}
