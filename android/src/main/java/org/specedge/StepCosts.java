package org.specedge;

/**
 * What each step costs on the device, as {@link SpeculativeRunner#measureStepCosts} measures it:
 * the settings adaptive K weighs.
 *
 * <pre>{@code
 * StepCosts c = runner.measureStepCosts(9);
 * DraftingConfig measured = DraftingConfig.builder().adaptiveK(true)
 *     .costs(c.draftStepCost, DraftingConfig.model().verifyRowCost).verifyCosts(c.verifyCosts()).build();
 * }</pre>
 */
public final class StepCosts {
  /** The positions of context the steps ran at. */
  public final long context;
  /** The median target decode step, in seconds: the unit of the costs. */
  public final double decodeStepSeconds;
  /** One draft-model step, in target decode steps (0 without a draft model). */
  public final double draftStepCost;
  private final double[] verifyCosts;

  // values: context, decode step seconds, draft step cost, then the verify costs (the JNI layout)
  StepCosts(double[] values) {
    context = (long) values[0];
    decodeStepSeconds = values[1];
    draftStepCost = values[2];
    verifyCosts = java.util.Arrays.copyOfRange(values, 3, values.length);
  }

  /** @return the verify step's cost with 1, 2, ... proposals, in target decode steps */
  public double[] verifyCosts() {
    return verifyCosts.clone();
  }

  @Override
  public String toString() {
    return "StepCosts{context=" + context + ", decodeStepSeconds=" + decodeStepSeconds + ", draftStepCost="
        + draftStepCost + ", verifyCosts=" + java.util.Arrays.toString(verifyCosts) + "}";
  }
}
