package com.photon;

/**
 * An engine's waiting queue is full (PHOTON_ERR_BUSY): Engine.submit refused the request; submit
 * it again later.
 */
public class BusyException extends PhotonException {
  private static final long serialVersionUID = 1L;

  public BusyException(int status, String statusName, String message) {
    super(status, statusName, message);
  }
}
