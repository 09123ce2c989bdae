package com.photon;

/** A PHOTON call failed: the library's status code and its message (which names the input). */
public class PhotonException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int status;
  private final String statusName;

  public PhotonException(int status, String statusName, String message) {
    super(message);
    this.status = status;
    this.statusName = statusName;
  }

  /** The photon_status code, e.g. 3 for PHOTON_ERR_IO. */
  public int getStatus() {
    return status;
  }

  /** The status's symbolic name, e.g. "PHOTON_ERR_IO". */
  public String getStatusName() {
    return statusName;
  }
}
