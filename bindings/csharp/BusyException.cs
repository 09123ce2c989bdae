namespace Photon {

/// <summary>An engine's waiting queue is full (PHOTON_ERR_BUSY): Engine.Submit refused the
/// request; submit it again later.</summary>
public class BusyException : PhotonException {
  public BusyException(int status, string statusName, string message)
      : base(status, statusName, message) {}
}

}
