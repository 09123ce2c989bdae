package com.photon;

/**
 * Receives each token of Session.generateBatch with its session's index in the batch; returns
 * false to stop that session.
 */
@FunctionalInterface
public interface BatchCallback {
  boolean onToken(int sessionIndex, Token token);
}
