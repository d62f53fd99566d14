package org.specedge;

/**
 * A model directory, manifest, program or tokenizer the runner cannot use, or a program that
 * failed to execute. The message names the file or the argument.
 */
public class SpecEdgeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** @param message what failed, naming the file or argument */
  public SpecEdgeException(String message) {
    super(message);
  }
}
