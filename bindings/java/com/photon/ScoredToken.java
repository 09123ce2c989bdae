package com.photon;

import java.util.List;

/**
 * A token scored with its alternatives (Model.scoreTop): its id, log p(token | the tokens before
 * it) as Model.score gives it (NaN for the first token, which is not predicted), and the k most
 * likely ids of its position with their log-probabilities, the most likely first, the lower id
 * first on ties (empty for the first token). Where the token is among them, its value there
 * equals logprob exactly, so topLogprobs().get(0).id() == id() tells whether it was the greedy
 * choice.
 */
public record ScoredToken(int id, float logprob, List<TopLogprob> topLogprobs) {
  /** The alternatives are kept as an unmodifiable copy; null is refused. */
  public ScoredToken {
    topLogprobs = List.copyOf(topLogprobs);
  }

  /**
   * The tokens of a native result, whose alternatives are rows of k cells (position i's are cells
   * i * k to (i + 1) * k - 1); frees it.
   */
  static List<ScoredToken> listOf(TopScores scores) {
    try {
      int[] ids = scores.tokens();
      float[] logprobs = scores.logprobs();
      int k = scores.k();
      int[] topIds = scores.topTokens();
      float[] topLogprobs = scores.topLogprobs();
      ScoredToken[] scored = new ScoredToken[ids.length];
      for (int i = 0; i < ids.length; ++i) {
        TopLogprob[] row = new TopLogprob[i == 0 ? 0 : k];  // the first token has none
        for (int j = 0; j < row.length; ++j) {
          row[j] = new TopLogprob(topIds[i * k + j], topLogprobs[i * k + j]);
        }
        scored[i] = new ScoredToken(ids[i], logprobs[i], List.of(row));
      }
      return List.of(scored);
    } finally {
      scores.delete();
    }
  }
}
