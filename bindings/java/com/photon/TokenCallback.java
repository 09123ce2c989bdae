package com.photon;

/** Receives each token of Session.generate; returns false to stop generation. */
@FunctionalInterface
public interface TokenCallback {
  boolean onToken(Token token);
}
