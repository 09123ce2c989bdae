namespace Photon {

/// <summary>A generated token: its id, its UTF-8-complete text piece (may be empty while a
/// character is split across tokens) and log p(token) under the model's unmodified
/// distribution.</summary>
public sealed class Token {
  public Token(int id, string piece, float logprob) {
    Id = id;
    Piece = piece;
    Logprob = logprob;
  }

  public int Id { get; }
  public string Piece { get; }
  public float Logprob { get; }

  public override string ToString() => Piece;
}

}
