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

/// <summary>One alternative of a generated token (Token.TopLogprobs): a token id and its
/// log-probability at the token's position under the model's unmodified distribution.</summary>
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
