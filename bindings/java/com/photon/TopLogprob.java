package com.photon;

import java.util.List;
import java.util.function.Supplier;

/**
 * One alternative of a generated or scored token (Token.topLogprobs(),
 * ScoredToken.topLogprobs()): a token id and its log-probability at the token's position under
 * the model's unmodified distribution.
 */
public record TopLogprob(int id, float logprob) {
  /** The alternatives of ids[i] and logprobs[i]; logprobs is not asked for when there are none. */
  static List<TopLogprob> listOf(int[] ids, Supplier<float[]> logprobs) {
    if (ids.length == 0) return List.of();
    float[] values = logprobs.get();
    TopLogprob[] alternatives = new TopLogprob[ids.length];
    for (int i = 0; i < ids.length; ++i) alternatives[i] = new TopLogprob(ids[i], values[i]);
    return List.of(alternatives);
  }
}
