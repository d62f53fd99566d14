package org.specedge;

/**
 * How tokens are chosen: greedy (temperature 0, the default) or sampled from the target's
 * distribution after the filters, which the draft and target programs apply identically.
 *
 * <pre>{@code
 * SamplingConfig greedy = SamplingConfig.greedy();
 * SamplingConfig sampled = SamplingConfig.builder().temperature(0.8f).topP(0.95f).seed(1).build();
 * }</pre>
 *
 * <p>Values are checked by the runner when generating: out of range, {@code generate} throws
 * {@link IllegalArgumentException} naming the parameter.
 */
public final class SamplingConfig {
  /** 0: greedy; else the softmax temperature. */
  public final float temperature;
  /** Keep the k most likely tokens (0: off). */
  public final int topK;
  /** Keep the smallest set of tokens with this much probability (1: off). */
  public final float topP;
  /** Drop tokens less likely than this times the most likely one (0: off). */
  public final float minP;
  /** Divide the positive logits (multiply the negative ones) of tokens already in the context (1: off). */
  public final float repetitionPenalty;
  /** Seeds the Philox stream: the same seed gives the same tokens on every device. */
  public final long seed;

  private SamplingConfig(Builder b) {
    temperature = b.temperature;
    topK = b.topK;
    topP = b.topP;
    minP = b.minP;
    repetitionPenalty = b.repetitionPenalty;
    seed = b.seed;
  }

  /**
   * Greedy decoding: the target's most likely token at each step.
   *
   * @return a configuration with every filter off and temperature 0
   */
  public static SamplingConfig greedy() {
    return builder().build();
  }

  /**
   * Starts a configuration with every filter off and temperature 0.
   *
   * @return a new builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds a {@link SamplingConfig}; every filter starts off. */
  public static final class Builder {
    private float temperature = 0.0f;
    private int topK = 0;
    private float topP = 1.0f;
    private float minP = 0.0f;
    private float repetitionPenalty = 1.0f;
    private long seed = 0;

    private Builder() {}

    /**
     * @param value 0: greedy; else the softmax temperature (&gt; 0)
     * @return this builder
     */
    public Builder temperature(float value) {
      temperature = value;
      return this;
    }

    /**
     * @param value keep the k most likely tokens (0: off; the vocabulary size or more keeps every token)
     * @return this builder
     */
    public Builder topK(int value) {
      topK = value;
      return this;
    }

    /**
     * @param value keep the smallest set of tokens with this much probability, in (0, 1] (1: off)
     * @return this builder
     */
    public Builder topP(float value) {
      topP = value;
      return this;
    }

    /**
     * @param value drop tokens less likely than this times the most likely one, in [0, 1] (0: off)
     * @return this builder
     */
    public Builder minP(float value) {
      minP = value;
      return this;
    }

    /**
     * @param value penalty on the tokens already in the context, &gt; 0 (1: off)
     * @return this builder
     */
    public Builder repetitionPenalty(float value) {
      repetitionPenalty = value;
      return this;
    }

    /**
     * @param value the seed of the random stream
     * @return this builder
     */
    public Builder seed(long value) {
      seed = value;
      return this;
    }

    /** @return the configuration */
    public SamplingConfig build() {
      return new SamplingConfig(this);
    }
  }
}
