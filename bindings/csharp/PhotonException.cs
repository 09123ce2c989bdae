using System;

namespace Photon {

/// <summary>A PHOTON call failed: the library's status code and its message (which names the
/// input).</summary>
public class PhotonException : Exception {
  public PhotonException(int status, string statusName, string message) : base(message) {
    Status = status;
    StatusName = statusName;
  }

  /// <summary>The photon_status code, e.g. 3 for PHOTON_ERR_IO.</summary>
  public int Status { get; }

  /// <summary>The status's symbolic name, e.g. "PHOTON_ERR_IO".</summary>
  public string StatusName { get; }
}

}
