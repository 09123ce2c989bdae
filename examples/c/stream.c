/*
 * stream -- load a PHOTON model, stream a completion through a callback and through the pull API
 * (one token per call), save the session, restore it and continue; only the public C API.
 *
 *   usage: stream [MODEL] [PROMPT] [N]
 *
 * MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to "In the beginning", N (tokens
 * per step) to 16. The completion is written to stdout piece by piece as it is generated, a summary
 * to stderr; errors go to stderr with the library's message, and the exit status is non-zero.
 */
#include <errno.h>
#include <photon.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes a token's text; non-zero (stop generating) once stdout is gone. */
static int show(const char *piece, size_t piece_len) {
  return fwrite(piece, 1, piece_len, stdout) != piece_len || fflush(stdout) != 0;
}

static int on_token(void *user_data, int32_t token, const char *piece, size_t piece_len,
                    float logprob) {
  (void)user_data;
  (void)token;
  (void)logprob;
  return show(piece, piece_len); /* non-zero stops generation */
}

static void fail(const char *what) {
  fprintf(stderr, "stream: %s: %s\n", what, photon_last_error());
}

/* Tokenizes prompt with BOS first into a malloc'ed array (the caller frees it); NULL on failure. */
static int32_t *tokenize(const photon_model *model, const char *prompt, size_t *n_tokens) {
  size_t needed = 0;
  int32_t *tokens;
  photon_status status = photon_model_tokenize(model, prompt, strlen(prompt), 1, NULL, 0, &needed);
  if (status != PHOTON_OK && status != PHOTON_ERR_BUFFER_TOO_SMALL) return NULL;
  tokens = malloc((needed > 0 ? needed : 1) * sizeof *tokens);
  if (tokens == NULL) return NULL;
  if (photon_model_tokenize(model, prompt, strlen(prompt), 1, tokens, needed, n_tokens) !=
      PHOTON_OK) {
    free(tokens);
    return NULL;
  }
  return tokens;
}

/* Pulls up to n tokens one at a time. A piece is a few bytes; one longer than the buffer would
 * fail with PHOTON_ERR_BUFFER_TOO_SMALL, and the next call with more room would return it. */
static photon_status pull(photon_session *session, long n) {
  char piece[64];
  for (long i = 0; i < n; ++i) {
    int32_t token = -1;
    size_t piece_len = 0;
    photon_status status =
        photon_session_next_token(session, &token, piece, sizeof piece, &piece_len, NULL);
    if (status != PHOTON_OK || token < 0) return status; /* token < 0: generation stopped */
    if (show(piece, piece_len)) break;
  }
  return PHOTON_OK;
}

/* Saves session into a malloc'ed buffer (the caller frees it); NULL on failure. */
static void *save(photon_session *session, size_t *size) {
  void *state;
  if (photon_session_save(session, NULL, 0, size) != PHOTON_ERR_BUFFER_TOO_SMALL) return NULL;
  state = malloc(*size);
  if (state != NULL && photon_session_save(session, state, *size, size) != PHOTON_OK) {
    free(state);
    return NULL;
  }
  return state;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "models/photon-kjv.photon";
  const char *prompt = argc > 2 ? argv[2] : "In the beginning";
  long n = 16;
  photon_model *model = NULL;
  photon_session_options *options = NULL;
  photon_session *session = NULL, *restored = NULL;
  int32_t *tokens = NULL;
  size_t n_tokens = 0, state_size = 0;
  void *state = NULL;
  int exit_code = 1;

  if (argc > 4) {
    fprintf(stderr, "usage: %s [MODEL] [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  if (argc > 3) {
    char *end = NULL;
    errno = 0;
    n = strtol(argv[3], &end, 10);
    if (errno != 0 || end == argv[3] || *end != '\0' || n < 0 || n > INT32_MAX) {
      fprintf(stderr, "stream: N must be a non-negative integer, got '%s'\n", argv[3]);
      return 2;
    }
  }

  if (photon_model_load(path, NULL, &model) != PHOTON_OK) {
    fail("cannot load the model");
    goto done;
  }
  if ((tokens = tokenize(model, prompt, &n_tokens)) == NULL) {
    fail("cannot tokenize the prompt");
    goto done;
  }
  if (photon_session_options_create(&options) != PHOTON_OK ||
      photon_session_options_set_temperature(options, 0.8f) != PHOTON_OK ||
      photon_session_options_set_seed(options, 42) != PHOTON_OK ||
      photon_session_create(model, options, &session) != PHOTON_OK ||
      photon_session_prefill(session, tokens, n_tokens) != PHOTON_OK) {
    fail("cannot start a session on the prompt");
    goto done;
  }
  fputs(prompt, stdout);

  /* 1. A callback receives each token as it is generated; returning non-zero would stop. */
  if (photon_session_generate(session, (int32_t)n, on_token, NULL, NULL) != PHOTON_OK) {
    fail("generation failed");
    goto done;
  }
  /* 2. The pull API produces one token per call. */
  if (pull(session, n) != PHOTON_OK) {
    fail("generation failed");
    goto done;
  }
  /* 3. Save the session, restore the state into a new session and continue there. */
  if ((state = save(session, &state_size)) == NULL ||
      photon_session_restore(model, state, state_size, &restored) != PHOTON_OK) {
    fail("cannot save and restore the session");
    goto done;
  }
  if (pull(restored, n) != PHOTON_OK) {
    fail("generation failed");
    goto done;
  }
  fputc('\n', stdout);
  fprintf(stderr, "[%d tokens, %s, state %zu bytes]\n", (int)photon_session_position(restored),
          photon_session_mode(restored) == PHOTON_MODE_RECGEN ? "recgen" : "hiergen", state_size);
  exit_code = 0;

done:
  free(state);
  free(tokens);
  photon_session_free(restored); /* free functions accept NULL */
  photon_session_free(session);
  photon_session_options_free(options);
  photon_model_free(model);
  return exit_code;
}
