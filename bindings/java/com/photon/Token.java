package com.photon;

import java.util.List;

/**
 * A generated token: its id, its UTF-8-complete text piece (may be empty while a character is
 * split across tokens), log p(token) under the model's unmodified distribution, and the
 * alternatives of its position: the k most likely ids with their log-probabilities, the most
 * likely first (SessionOptions.setTopLogprobs(k); empty when k is 0). Model.tokenPiece names
 * them.
 */
public record Token(int id, String piece, float logprob, List<TopLogprob> topLogprobs) {
  /** The alternatives are kept as an unmodifiable copy; null is refused. */
  public Token {
    topLogprobs = List.copyOf(topLogprobs);
  }

  /** A token without alternatives. */
  public Token(int id, String piece, float logprob) {
    this(id, piece, logprob, List.of());
  }
}
