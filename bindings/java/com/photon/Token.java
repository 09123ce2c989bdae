package com.photon;

/**
 * A generated token: its id, its UTF-8-complete text piece (may be empty while a character is
 * split across tokens) and log p(token) under the model's unmodified distribution.
 */
public record Token(int id, String piece, float logprob) {}
