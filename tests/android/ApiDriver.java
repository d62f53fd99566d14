import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import org.specedge.DraftingConfig;
import org.specedge.GenerationStats;
import org.specedge.SamplingConfig;
import org.specedge.SpeculativeRunner;
import org.specedge.StepCosts;
import org.specedge.TokenCallback;

/**
 * Drives org.specedge's API for tests/test_android.py, on a desktop JVM or an arm64 one under
 * qemu; prints what the test compares with spec-edge-run. Modes:
 *   tokens DIR K MAX_NEW SPECULATIVE TEMPERATURE TOP_K TOP_P MIN_P PENALTY SEED ID,ID,...
 *          [DRAFTER ADAPTIVE [VERIFY_COSTS]]
 *   text DIR MAX_NEW PROMPT
 *   control DIR        (stop, close, concurrency, callback exceptions)
 *   errors DIR         (bad input: one line per case, the exception and its message)
 *   load DIR           (the same line for loading DIR)
 *   defaults           (DraftingConfig.model()'s settings, one line)
 *   costs DIR          (measureStepCosts: context, decode seconds, draft cost, 1 per positive verify
 *                      cost; then whether adaptive K under them decodes as the target alone)
 *   fuzz DIR TRIALS SEED  (byte flips in DIR's programs and manifest, as tests/fuzz_programs.py:
 *                      one line per outcome and its count; DIR is changed and restored)
 *   tokenizer-fuzz DIR LIST  (each mutated tokenizer file LIST names, from tests/fuzz_files.py,
 *                      put in DIR in turn, loaded and used to encode and decode: one line per
 *                      outcome and its count; DIR is restored)
 */
public final class ApiDriver {
  public static void main(String[] args) throws Exception {
    switch (args[0]) {
      case "tokens": tokens(args); break;
      case "text": text(args); break;
      case "codec": codec(args); break;
      case "control": control(args[1]); break;
      case "errors": errors(args[1]); break;
      case "load": attempt("load", () -> new SpeculativeRunner(args[1]).close()); break;
      case "defaults": defaults(); break;
      case "costs": costs(args[1]); break;
      case "fuzz": fuzz(args[1], Integer.parseInt(args[2]), Long.parseLong(args[3])); break;
      case "tokenizer-fuzz": tokenizerFuzz(args[1], args[2]); break;
      default: throw new IllegalArgumentException("unknown mode " + args[0]);
    }
  }

  static void defaults() {
    DraftingConfig d = DraftingConfig.model();
    System.out.printf("drafter=%s min_ngram=%d max_ngram=%d min_match=%d adaptive_k=%b draft_step_cost=%s "
        + "verify_row_cost=%s%n", d.drafter, d.minNgram, d.maxNgram, d.minMatch, d.adaptiveK,
        Double.toString(d.draftStepCost), Double.toString(d.verifyRowCost));
  }

  // measureStepCosts, then a runner loaded with what it measured decoding as the target alone.
  static void costs(String dir) {
    long[] prompt = {1, 2, 3, 4, 5};
    try (SpeculativeRunner r = new SpeculativeRunner(dir)) {
      StepCosts c = r.measureStepCosts(2);
      System.out.println(c.context + " " + c.decodeStepSeconds + " " + c.draftStepCost + " "
          + join(Arrays.stream(c.verifyCosts()).mapToLong(v -> v > 0 ? 1 : 0).toArray()));
      DraftingConfig measured = DraftingConfig.builder().adaptiveK(true)
          .costs(c.draftStepCost, DraftingConfig.model().verifyRowCost).verifyCosts(c.verifyCosts()).build();
      try (SpeculativeRunner m = new SpeculativeRunner(dir, 0, measured)) {
        SamplingConfig greedy = SamplingConfig.greedy();
        System.out.println(Arrays.equals(m.generate(prompt, 20, greedy, true, -1, null),
            m.generate(prompt, 20, greedy, false, -1, null)));
      }
    }
  }

  static long[] ids(String csv) {
    String[] items = csv.split(",");
    long[] out = new long[items.length];
    for (int i = 0; i < items.length; ++i) out[i] = Long.parseLong(items[i]);
    return out;
  }

  static String join(long[] values) {
    StringBuilder b = new StringBuilder();
    for (long v : values) b.append(b.length() == 0 ? "" : " ").append(v);
    return b.toString();
  }

  // The tokens, then the streamed tokens (which must be the same), then the stats.
  static void tokens(String[] a) {
    SamplingConfig sampling = SamplingConfig.builder().temperature(Float.parseFloat(a[5]))
        .topK(Integer.parseInt(a[6])).topP(Float.parseFloat(a[7])).minP(Float.parseFloat(a[8]))
        .repetitionPenalty(Float.parseFloat(a[9])).seed(Long.parseLong(a[10])).build();
    DraftingConfig drafting = DraftingConfig.model();
    if (a.length > 12) {
      DraftingConfig.Builder b = DraftingConfig.builder().drafter(a[12]).adaptiveK(a[13].equals("1"));
      if (a.length > 14) b.verifyCosts(Arrays.stream(a[14].split(",")).mapToDouble(Double::parseDouble).toArray());
      drafting = b.build();
    }
    try (SpeculativeRunner runner = new SpeculativeRunner(a[1], Integer.parseInt(a[2]), drafting)) {
      List<Long> streamed = new ArrayList<>();
      int[] calls = {0};
      long[] out = runner.generate(ids(a[11]), Integer.parseInt(a[3]), sampling, a[4].equals("1"), -1,
          (tokens, text) -> {
            calls[0]++;
            for (long t : tokens) streamed.add(t);
          });
      GenerationStats s = runner.getStats();
      System.out.println(join(out));
      long[] flat = new long[streamed.size()];
      for (int i = 0; i < flat.length; ++i) flat[i] = streamed.get(i);
      System.out.println(join(flat));
      System.out.printf("k=%d max_k=%d vocab=%d context=%d callbacks=%d new_tokens=%d rounds=%d accepted=%d"
          + " proposed=%d hist=%s draft_seconds=%s target_seconds=%s model_rounds=%d model_proposed=%d model_accepted=%d"
          + " lookup_rounds=%d lookup_proposed=%d lookup_accepted=%d plain_steps=%d%n", runner.getK(),
          runner.getMaxK(), runner.getVocabSize(), runner.getMaxContextLength(), calls[0], s.newTokens, s.rounds,
          s.accepted, s.proposed, join(s.acceptedHistogram()).replace(" ", ","), s.draftSeconds > 0,
          s.targetSeconds > 0, s.modelRounds, s.modelProposed, s.modelAccepted, s.lookupRounds, s.lookupProposed,
          s.lookupAccepted, s.plainSteps);
    }
  }

  // The returned text, then the streamed pieces joined, then the prompt's ids.
  static void text(String[] a) {
    try (SpeculativeRunner runner = new SpeculativeRunner(a[1])) {
      StringBuilder streamed = new StringBuilder();
      String out = runner.generateText(a[3], Integer.parseInt(a[2]), SamplingConfig.greedy(),
          (tokens, piece) -> streamed.append(piece));
      System.out.println(escape(out));
      System.out.println(escape(streamed.toString()));
      System.out.println(join(runner.encode(a[3])));
      System.out.println(escape(runner.decode(runner.encode(a[3]))));
    }
  }

  // For each (model directory, text) pair: the ids of the text, then their text; texts as UTF-8
  // hex, so that any text passes unchanged. One JVM for many tokenizers (a JVM under qemu starts
  // slowly).
  static void codec(String[] a) {
    for (int k = 1; k + 1 < a.length; k += 2) {
      byte[] bytes = new byte[a[k + 1].length() / 2];
      for (int i = 0; i < bytes.length; ++i)
        bytes[i] = (byte) Integer.parseInt(a[k + 1].substring(2 * i, 2 * i + 2), 16);
      try (SpeculativeRunner runner = new SpeculativeRunner(a[k])) {
        long[] ids = runner.encode(new String(bytes, java.nio.charset.StandardCharsets.UTF_8));
        System.out.println(join(ids));
        StringBuilder hex = new StringBuilder();
        for (byte b : runner.decode(ids).getBytes(java.nio.charset.StandardCharsets.UTF_8))
          hex.append(String.format("%02x", b & 0xFF));
        System.out.println(hex);
      }
    }
  }

  static String escape(String s) {
    return s.replace("\\", "\\\\").replace("\n", "\\n");
  }

  static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
    System.out.println("ok " + what);
  }

  static void control(String dir) throws Exception {
    long[] prompt = {1, 2, 3};
    try (SpeculativeRunner runner = new SpeculativeRunner(dir)) {
      List<long[]> rounds = new ArrayList<>();
      long[] full = runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, (t, s) -> rounds.add(t));

      // stop() from the callback: that round's tokens, then the call returns.
      long[] first = runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, (t, s) -> runner.stop());
      check(join(first).equals(join(rounds.get(0))), "stop from the callback ends after that round");
      runner.stop();
      check(join(runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, null)).equals(join(full)),
          "a stop with nothing generating does not reach the next call");

      // stop() from another thread, while the callback of the first round waits for it.
      CountDownLatch inCallback = new CountDownLatch(1), stopped = new CountDownLatch(1);
      Thread stopper = new Thread(() -> {
        try {
          inCallback.await();
          runner.stop();
          stopped.countDown();
        } catch (InterruptedException e) {
          throw new RuntimeException(e);
        }
      });
      stopper.start();
      long[] fromThread = runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, (t, s) -> {
        inCallback.countDown();
        try {
          stopped.await();
        } catch (InterruptedException e) {
          throw new RuntimeException(e);
        }
      });
      stopper.join();
      check(join(fromThread).equals(join(rounds.get(0))), "stop from another thread");

      // An exception in the callback ends the call and propagates; the runner stays usable.
      try {
        runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, (t, s) -> {
          throw new IllegalStateException("from the callback");
        });
        check(false, "callback exception propagates");
      } catch (IllegalStateException e) {
        check(e.getMessage().equals("from the callback"), "callback exception propagates");
      }
      check(join(runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, null)).equals(join(full)),
          "usable after a callback exception");

      // A second generate while one runs is refused; so is getStats.
      AtomicReference<String> nested = new AtomicReference<>("none");
      runner.generate(prompt, 4, SamplingConfig.greedy(), true, -1, (t, s) -> {
        try {
          runner.generate(prompt, 4, SamplingConfig.greedy(), true, -1, null);
        } catch (IllegalStateException e) {
          nested.set(e.getMessage());
        }
        try {
          runner.getStats();
        } catch (IllegalStateException e) {
          nested.set(nested.get() + " | " + e.getMessage());
        }
      });
      check(nested.get().contains("another call is running") && nested.get().contains("getStats"),
          "concurrent generate and getStats refused: " + nested.get());

      // close() from another thread stops the call in flight and waits for it.
      CountDownLatch started = new CountDownLatch(1);
      Thread closer = new Thread(() -> {
        try {
          started.await();
          runner.close();
        } catch (InterruptedException e) {
          throw new RuntimeException(e);
        }
      });
      closer.start();
      long[] closed = runner.generate(prompt, 40, SamplingConfig.greedy(), true, -1, (t, s) -> started.countDown());
      closer.join();
      check(closed.length > 0 && closed.length < full.length, "close stops the call in flight");
      try {
        runner.generate(prompt, 4, SamplingConfig.greedy(), true, -1, null);
        check(false, "closed runner refuses");
      } catch (IllegalStateException e) {
        check(e.getMessage().contains("already closed"), "closed runner refuses");
      }
      runner.close();  // idempotent
    }
  }

  interface Case {
    void run() throws Exception;
  }

  static void attempt(String name, Case c) {
    try {
      c.run();
      System.out.println(name + "\tnone\t");
    } catch (Throwable e) {
      System.out.println(name + "\t" + e.getClass().getName() + "\t" + e.getMessage());
    }
  }

  static long[] decode(String dir) {
    try (SpeculativeRunner r = new SpeculativeRunner(dir)) {
      return r.generate(new long[] {5, 17, 3, 29}, 6, SamplingConfig.greedy(), true, -1, null);
    }
  }

  // Each trial flips 1-4 bits of one file; the outcome: "refused FILE" (an exception naming it),
  // "same" (the clean tokens), "different", or "unnamed: MESSAGE". A crash ends the JVM.
  static void fuzz(String dir, int trials, long seed) throws Exception {
    String[] files = {"draft.pte", "target.pte", "manifest.json"};
    long[] clean = decode(dir);
    Random rng = new Random(seed);
    TreeMap<String, Integer> outcomes = new TreeMap<>();
    for (int trial = 0; trial < trials; ++trial) {
      String name = files[rng.nextInt(files.length)];
      Path path = Paths.get(dir, name);
      byte[] original = Files.readAllBytes(path);
      byte[] data = original.clone();
      for (int flips = 1 + rng.nextInt(4); flips > 0; --flips) data[rng.nextInt(data.length)] ^= 1 << rng.nextInt(8);
      System.err.println("trial " + trial + ": " + name);
      Files.write(path, data);
      String outcome;
      try {
        outcome = Arrays.equals(decode(dir), clean) ? "same" : "different";
      } catch (RuntimeException e) {
        outcome = refusal(e, files);
      }
      outcomes.merge(outcome, 1, Integer::sum);
      Files.write(path, original);
    }
    for (java.util.Map.Entry<String, Integer> e : outcomes.entrySet()) System.out.println(e.getKey() + "\t" + e.getValue());
  }

  // "refused FILE" for an error naming one of files, else "unnamed: " and its message.
  static String refusal(RuntimeException e, String[] files) {
    String message = String.valueOf(e.getMessage());
    for (String f : files)
      if (message.contains(f)) return "refused " + f;
    return "unnamed: " + message;
  }

  static void tokenizerFuzz(String dir, String list) throws Exception {
    String[] files = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    TreeMap<String, Integer> outcomes = new TreeMap<>();
    for (String line : Files.readAllLines(Paths.get(list))) {
      if (line.isEmpty()) continue;
      String[] trial = line.split(" ", 3);  // TRIAL NAME PATH
      Path path = Paths.get(dir, trial[1]);
      byte[] original = Files.readAllBytes(path);
      System.err.println("trial " + trial[0] + ": " + trial[1]);
      Files.write(path, Files.readAllBytes(Paths.get(trial[2])));
      String outcome = "loaded";
      try (SpeculativeRunner runner = new SpeculativeRunner(dir)) {
        long[] ids = runner.encode("def parse(path):\n    return open(path).read() \u00dcn\u00efc\u00f6d\u00e9");
        for (long id : ids)
          if (id < 0 || id >= runner.getVocabSize()) outcome = "wrong id " + id;
        runner.decode(ids);
      } catch (RuntimeException e) {
        outcome = refusal(e, files);
      }
      outcomes.merge(outcome, 1, Integer::sum);
      Files.write(path, original);
    }
    for (java.util.Map.Entry<String, Integer> e : outcomes.entrySet()) System.out.println(e.getKey() + "\t" + e.getValue());
  }

  static void errors(String dir) {
    SamplingConfig greedy = SamplingConfig.greedy();
    long[] prompt = {1, 2, 3};
    attempt("null_dir", () -> new SpeculativeRunner(null));
    attempt("missing_dir", () -> new SpeculativeRunner(dir + "/missing"));
    attempt("k_too_big", () -> new SpeculativeRunner(dir, 99));
    attempt("k_negative", () -> new SpeculativeRunner(dir, -1));
    attempt("drafter", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().drafter("ngram").build()));
    attempt("drafter_null", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().drafter(null).build()));
    attempt("ngrams", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().drafter("lookup").ngrams(3, 2)
        .build()));
    attempt("min_match", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().drafter("hybrid").minMatch(7)
        .build()));
    attempt("costs", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().costs(Double.NaN, 0.1).build()));
    attempt("verify_costs", () -> new SpeculativeRunner(dir, 0, DraftingConfig.builder().verifyCosts(1.2).build()));
    attempt("verify_costs_null", () -> DraftingConfig.builder().verifyCosts((double[]) null));
    try (SpeculativeRunner r = new SpeculativeRunner(dir)) {
      attempt("null_prompt", () -> r.generate(null, 4, greedy, true, -1, null));
      attempt("null_sampling", () -> r.generate(prompt, 4, null, true, -1, null));
      attempt("empty_prompt", () -> r.generate(new long[0], 4, greedy, true, -1, null));
      attempt("id_out_of_vocab", () -> r.generate(new long[] {1, 1 << 30}, 4, greedy, true, -1, null));
      attempt("negative_max_new", () -> r.generate(prompt, -1, greedy, true, -1, null));
      attempt("too_long", () -> r.generate(prompt, 1 << 30, greedy, true, -1, null));
      attempt("temperature", () -> r.generate(prompt, 4, SamplingConfig.builder().temperature(-1).build(), true, -1,
          null));
      attempt("temperature_nan", () -> r.generate(prompt, 4, SamplingConfig.builder().temperature(Float.NaN).build(),
          true, -1, null));
      attempt("temperature_tiny", () -> r.generate(prompt, 4, SamplingConfig.builder().temperature(1e-39f).build(),
          true, -1, null));
      attempt("top_k", () -> r.generate(prompt, 4, SamplingConfig.builder().topK(-3).build(), true, -1, null));
      attempt("top_p", () -> r.generate(prompt, 4, SamplingConfig.builder().topP(0).build(), true, -1, null));
      attempt("min_p", () -> r.generate(prompt, 4, SamplingConfig.builder().minP(2).build(), true, -1, null));
      attempt("penalty", () -> r.generate(prompt, 4, SamplingConfig.builder().repetitionPenalty(0).build(), true, -1,
          null));
      attempt("null_text", () -> r.generateText(null, 4, greedy, null));
      attempt("repeats", () -> r.measureStepCosts(0));
      attempt("decode_bad_id", () -> r.decode(new long[] {-5}));
      attempt("still_usable", () -> {
        if (r.generate(prompt, 4, greedy, true, -1, null).length != 4) throw new AssertionError("not 4 tokens");
      });
    }
  }
}
