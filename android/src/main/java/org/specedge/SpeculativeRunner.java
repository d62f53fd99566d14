package org.specedge;

/**
 * Speculative decoding on the device over a model directory written by
 * {@code export/export_pair.py}: {@code draft.pte}, {@code target.pte}, {@code manifest.json} and
 * {@code tokenizer.json}. Each round the draft program proposes K tokens, the target program scores
 * them in one step and its verify op keeps an accepted prefix plus one token, so the output is
 * what the target alone would produce (greedy) or is distributed as the target's (sampled).
 *
 * <pre>{@code
 * try (SpeculativeRunner runner = new SpeculativeRunner("/data/local/tmp/spec_edge")) {
 *   String text = runner.generateText("def fib(n):", 64, SamplingConfig.greedy(),
 *       (tokens, piece) -> System.out.print(piece));
 *   Log.i("demo", runner.getStats().toString());
 * }
 * }</pre>
 *
 * <p>One generate call runs at a time per runner (a second one throws {@link
 * IllegalStateException}); {@link #stop()} may be called from any thread. Errors: {@link
 * SpecEdgeException} for a model directory or program the runner cannot use, {@link
 * IllegalArgumentException} for arguments out of range, each with a message naming the file or
 * argument.
 */
public final class SpeculativeRunner implements AutoCloseable {
  static {
    System.loadLibrary("spec_edge_jni");
  }


  private long handle; // the native runner; 0 once closed. Guarded by this.
  private boolean generating; // guarded by this
  private final int k, maxK, vocabSize, maxContextLength;

  /**
   * Loads the model directory with the K it was exported for.
   *
   * @param modelDir the directory written by {@code export/export_pair.py}
   * @throws SpecEdgeException if a file is missing or corrupted, or the programs do not match
   *     the manifest or each other
   */
  public SpeculativeRunner(String modelDir) {
    this(modelDir, 0);
  }

  /**
   * Loads the model directory, proposing {@code k} draft tokens per round.
   *
   * @param modelDir the directory written by {@code export/export_pair.py}
   * @param k draft tokens per round: 1 up to the exported K; 0: the exported K
   * @throws SpecEdgeException if a file is missing or corrupted, the programs do not match the
   *     manifest or each other, or k is out of range
   */
  public SpeculativeRunner(String modelDir, int k) {
    this(modelDir, k, DraftingConfig.model());
  }

  /**
   * Loads the model directory, with proposals from {@code drafting}'s drafter.
   *
   * @param modelDir the directory written by {@code export/export_pair.py} (for the lookup
   *     drafter, target.pte alone suffices)
   * @param k proposals per round (the most per round with adaptive K): 1 up to the exported K; 0:
   *     the exported K
   * @param drafting the drafter and its settings
   * @throws SpecEdgeException if a file is missing or corrupted, or the programs do not match the
   *     manifest or each other
   * @throws IllegalArgumentException if k or a drafting setting is out of range
   */
  public SpeculativeRunner(String modelDir, int k, DraftingConfig drafting) {
    if (modelDir == null) {
      throw new IllegalArgumentException("modelDir: expected the path of a model directory, got null");
    }
    if (k < 0) {
      throw new IllegalArgumentException("k: expected 0 (the exported K) or more, got " + k);
    }
    if (drafting == null) {
      throw new IllegalArgumentException("drafting: expected a DraftingConfig, got null");
    }
    if (drafting.drafter == null) {
      throw new IllegalArgumentException("drafter: expected one of model, lookup, hybrid, got null");
    }
    handle = nativeLoad(modelDir, k, drafting.drafter, drafting.adaptiveK, drafting.minNgram, drafting.maxNgram,
        drafting.minMatch, drafting.draftStepCost, drafting.verifyRowCost, drafting.verifyCosts());
    int[] shape = nativeShape(handle);
    this.k = shape[0];
    this.maxK = shape[1];
    this.vocabSize = shape[2];
    this.maxContextLength = shape[3];
  }

  /**
   * Generates up to {@code maxNew} token ids after {@code promptIds}.
   *
   * @param promptIds the prompt, at least one token id in [0, vocabulary size)
   * @param maxNew the most tokens to generate; prompt + maxNew + K + 1 must fit in the context
   * @param sampling greedy or sampled, with the filters
   * @param speculative false: target-only decoding through the same programs (the baseline)
   * @param eosId generation ends after this token id (which is kept); -1: none
   * @param callback receives each round's tokens as they are decided, or null
   * @return the generated ids (those of a call ended by {@link #stop()} included)
   */
  public long[] generate(long[] promptIds, int maxNew, SamplingConfig sampling, boolean speculative, long eosId,
      TokenCallback callback) {
    requireNonNull(promptIds, "promptIds");
    requireNonNull(sampling, "sampling");
    return run(promptIds, maxNew, sampling, speculative, eosId, callback, false);
  }

  /**
   * Generates up to {@code maxNew} tokens of text after {@code prompt}, speculatively, ending at
   * any of the checkpoint's end tokens ({@code generation_config.json} / {@code
   * tokenizer_config.json} beside {@code tokenizer.json}, else {@code <|endoftext|>}). The
   * callback receives each round's text.
   *
   * @param prompt the text to continue
   * @param maxNew the most tokens to generate
   * @param sampling greedy or sampled, with the filters
   * @param callback receives each round's tokens and text as they are decided, or null
   * @return the generated text (without the prompt)
   */
  public String generateText(String prompt, int maxNew, SamplingConfig sampling, TokenCallback callback) {
    requireNonNull(prompt, "prompt");
    requireNonNull(sampling, "sampling");
    long[] promptIds = encode(prompt);
    long[] out = run(promptIds, maxNew, sampling, true, -1, callback, true);
    return decode(out);
  }

  /**
   * @param text any text
   * @return its token ids by the model directory's {@code tokenizer.json}
   */
  public long[] encode(String text) {
    requireNonNull(text, "text");
    synchronized (this) {
      return nativeEncode(open(), text);
    }
  }

  /**
   * @param tokenIds token ids of the vocabulary
   * @return their text (special tokens are skipped)
   */
  public String decode(long[] tokenIds) {
    requireNonNull(tokenIds, "tokenIds");
    synchronized (this) {
      return nativeDecode(open(), tokenIds);
    }
  }

  /**
   * @param token a token of the vocabulary, such as {@code "<|endoftext|>"}
   * @return its id, or -1
   */
  public long tokenId(String token) {
    requireNonNull(token, "token");
    synchronized (this) {
      return nativeTokenId(open(), token);
    }
  }

  /**
   * Ends the generate call in flight after its current round; that round's tokens are still
   * delivered and returned. Any thread; no effect when nothing is generating.
   */
  public void stop() {
    synchronized (this) {
      if (handle != 0) {
        nativeStop(handle);
      }
    }
  }

  /**
   * @return statistics of the last generate call
   * @throws IllegalStateException during a generate call
   */
  public synchronized GenerationStats getStats() {
    long h = open();
    if (generating) {
      throw new IllegalStateException("getStats: a generate call is running; ask once it returns");
    }
    return nativeStats(h);
  }

  /** @return draft tokens per round */
  public int getK() {
    return k;
  }

  /** @return the K the programs were exported for */
  public int getMaxK() {
    return maxK;
  }

  /** @return the programs' vocabulary size */
  public int getVocabSize() {
    return vocabSize;
  }

  /** @return the context length: prompt + generated tokens + K + 1 must fit in it */
  public int getMaxContextLength() {
    return maxContextLength;
  }

  /** Frees the programs; stops and waits for a generate call in flight first. Idempotent. */
  @Override
  public synchronized void close() {
    if (handle == 0) {
      return;
    }
    nativeStop(handle);
    boolean interrupted = false;
    while (generating) {
      try {
        wait();
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    nativeDestroy(handle);
    handle = 0;
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  private long[] run(long[] promptIds, int maxNew, SamplingConfig s, boolean speculative, long eosId,
      TokenCallback callback, boolean withText) {
    return exclusive("generate", h -> nativeGenerate(h, promptIds, maxNew, s.temperature, s.topK, s.topP, s.minP,
        s.repetitionPenalty, s.seed, speculative, eosId, callback, withText));
  }

  /**
   * Times each step on this device, for adaptive K: the median of {@code repeats} runs of a
   * target decode step, a draft step and the verify step with each K in 1..{@link #getK()},
   * greedy, at the end of a 128-token context (fewer where the context is shorter); what {@code
   * spec-edge-run --calibrate} prints. Runs as a generate call does, one at a time.
   *
   * @param repeats runs of each step, at least 1
   * @return the costs, in target decode steps: the settings of {@link DraftingConfig.Builder#costs}
   *     and {@link DraftingConfig.Builder#verifyCosts}
   * @throws IllegalArgumentException if repeats is below 1
   */
  public StepCosts measureStepCosts(int repeats) {
    return new StepCosts(exclusive("measureStepCosts", h -> nativeMeasureStepCosts(h, repeats)));
  }

  // call(handle), as the one call running on this runner.
  private <T> T exclusive(String name, java.util.function.LongFunction<T> call) {
    long h;
    synchronized (this) {
      h = open();
      if (generating) {
        throw new IllegalStateException(name + ": another call is running on this runner");
      }
      generating = true;
    }
    try {
      return call.apply(h);
    } finally {
      synchronized (this) {
        generating = false;
        notifyAll();
      }
    }
  }

  private long open() {
    if (handle == 0) {
      throw new IllegalStateException("SpeculativeRunner: already closed");
    }
    return handle;
  }

  private static void requireNonNull(Object value, String name) {
    if (value == null) {
      throw new IllegalArgumentException(name + ": expected a value, got null");
    }
  }

  /** The runner's drafting defaults, in the order of {@link DraftingConfig.Builder}'s fields. */
  static native double[] nativeDraftingDefaults();

  private static native long nativeLoad(String modelDir, int k, String drafter, boolean adaptiveK, int minNgram,
      int maxNgram, int minMatch, double draftStepCost, double verifyRowCost, double[] verifyCosts);

  private static native void nativeDestroy(long handle);

  private static native long[] nativeGenerate(long handle, long[] promptIds, int maxNew, float temperature, int topK,
      float topP, float minP, float repetitionPenalty, long seed, boolean speculative, long eosId,
      TokenCallback callback, boolean withText);

  private static native void nativeStop(long handle);

  private static native double[] nativeMeasureStepCosts(long handle, int repeats);

  private static native GenerationStats nativeStats(long handle);

  private static native int[] nativeShape(long handle);

  private static native long[] nativeEncode(long handle, String text);

  private static native String nativeDecode(long handle, long[] tokenIds);

  private static native long nativeTokenId(long handle, String token);
}
