using System;
using System.Collections.Generic;

namespace Photon {

/// <summary>A generated token: its id, its UTF-8-complete text piece (may be empty while a
/// character is split across tokens), log p(token) under the model's unmodified distribution, and
/// the alternatives of its position: the k most likely ids with their log-probabilities, the most
/// likely first (SessionOptions.SetTopLogprobs(k); empty when k is 0). Model.TokenPiece names
/// them.</summary>
public sealed class Token {
  public Token(int id, string piece, float logprob, IReadOnlyList<TopLogprob> topLogprobs = null) {
    Id = id;
    Piece = piece;
    Logprob = logprob;
    TopLogprobs = topLogprobs ?? Array.Empty<TopLogprob>();
  }

  public int Id { get; }
  public string Piece { get; }
  public float Logprob { get; }
  public IReadOnlyList<TopLogprob> TopLogprobs { get; }

  public override string ToString() => Piece;
}

/// <summary>A token scored with its alternatives (Model.ScoreTop): its id, log p(token | the
/// tokens before it) as Model.Score gives it (NaN for the first token, which is not predicted),
/// and the k most likely ids of its position with their log-probabilities, the most likely first,
/// the lower id first on ties (empty for the first token). Where the token is among them, its
/// value there equals Logprob exactly, so TopLogprobs[0].Id == Id tells whether it was the greedy
/// choice.</summary>
public sealed class ScoredToken {
  public ScoredToken(int id, float logprob, IReadOnlyList<TopLogprob> topLogprobs = null) {
    Id = id;
    Logprob = logprob;
    TopLogprobs = topLogprobs ?? Array.Empty<TopLogprob>();
  }

  public int Id { get; }
  public float Logprob { get; }
  public IReadOnlyList<TopLogprob> TopLogprobs { get; }

  public override string ToString() => $"{Id}: {Logprob}";

  // The tokens of a native result, whose alternatives are rows of k cells (position i's are cells
  // i * k to (i + 1) * k - 1); disposes of it.
  internal static IReadOnlyList<ScoredToken> Of(TopScores scores) {
    using (scores) {
      int[] ids = scores.Tokens();
      float[] logprobs = scores.Logprobs();
      int k = scores.K();
      int[] topIds = scores.TopTokens();
      float[] topLogprobs = scores.TopLogprobs();
      var scored = new ScoredToken[ids.Length];
      for (int i = 0; i < ids.Length; ++i) {
        var row = new TopLogprob[i == 0 ? 0 : k];  // the first token has none
        for (int j = 0; j < row.Length; ++j) {
          row[j] = new TopLogprob(topIds[i * k + j], topLogprobs[i * k + j]);
        }
        scored[i] = new ScoredToken(ids[i], logprobs[i], Array.AsReadOnly(row));
      }
      return Array.AsReadOnly(scored);
    }
  }
}

/// <summary>One alternative of a generated or scored token (Token.TopLogprobs,
/// ScoredToken.TopLogprobs): a token id and its log-probability at the token's position under the
/// model's unmodified distribution.</summary>
public struct TopLogprob {
  public TopLogprob(int id, float logprob) {
    Id = id;
    Logprob = logprob;
  }

  public int Id { get; }
  public float Logprob { get; }

  public override string ToString() => $"{Id}: {Logprob}";

  // The alternatives of ids[i] and logprobs()[i]; logprobs is not called when there are none.
  internal static IReadOnlyList<TopLogprob> Of(int[] ids, Func<float[]> logprobs) {
    if (ids.Length == 0) return Array.Empty<TopLogprob>();
    float[] values = logprobs();
    var alternatives = new TopLogprob[ids.Length];
    for (int i = 0; i < ids.Length; ++i) alternatives[i] = new TopLogprob(ids[i], values[i]);
    return Array.AsReadOnly(alternatives);
  }
}

}
