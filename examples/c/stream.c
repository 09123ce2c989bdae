/*
 * stream -- load a PHOTON model and stream a completion, using only the public C API.
 *
 *   usage: stream MODEL [PROMPT] [N]
 *
 * PROMPT defaults to "In the beginning", N (the number of tokens to generate) to 64. The completion
 * is written to stdout piece by piece as it is generated; errors go to stderr with the library's
 * message, and the exit status is non-zero.
 */
#include <errno.h>
#include <photon.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int on_token(void *user_data, int32_t token, const char *piece, size_t piece_len,
                    float logprob) {
  size_t *delivered = (size_t *)user_data;
  (void)token;
  (void)logprob;
  ++*delivered;
  if (fwrite(piece, 1, piece_len, stdout) != piece_len || fflush(stdout) != 0) {
    return 1; /* stdout is gone: stop generating */
  }
  return 0;
}

static int fail(const char *what) {
  fprintf(stderr, "stream: %s: %s\n", what, photon_last_error());
  return 1;
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

int main(int argc, char **argv) {
  const char *prompt = argc > 2 ? argv[2] : "In the beginning";
  long max_tokens = 64;
  photon_model *model = NULL;
  photon_session *session = NULL;
  int32_t *tokens = NULL;
  size_t n_tokens = 0;
  size_t delivered = 0;
  int exit_code = 1;

  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  if (argc > 3) {
    char *end = NULL;
    errno = 0;
    max_tokens = strtol(argv[3], &end, 10);
    if (errno != 0 || end == argv[3] || *end != '\0' || max_tokens < 0 || max_tokens > INT32_MAX) {
      fprintf(stderr, "stream: N must be a non-negative integer, got '%s'\n", argv[3]);
      return 2;
    }
  }

  if (photon_model_load(argv[1], NULL, &model) != PHOTON_OK) {
    exit_code = fail("cannot load the model");
  } else if ((tokens = tokenize(model, prompt, &n_tokens)) == NULL) {
    exit_code = fail("cannot tokenize the prompt");
  } else if (photon_session_create(model, NULL, &session) != PHOTON_OK) {
    exit_code = fail("cannot create a session");
  } else if (photon_session_prefill(session, tokens, n_tokens) != PHOTON_OK) {
    exit_code = fail("cannot process the prompt");
  } else {
    fputs(prompt, stdout);
    if (photon_session_generate(session, (int32_t)max_tokens, on_token, &delivered, NULL) !=
        PHOTON_OK) {
      exit_code = fail("generation failed");
    } else {
      fputc('\n', stdout);
      fprintf(stderr, "[%zu tokens, %s]\n", delivered,
              photon_session_mode(session) == PHOTON_MODE_RECGEN ? "recgen" : "hiergen");
      exit_code = 0;
    }
  }

  free(tokens);
  photon_session_free(session); /* free functions accept NULL */
  photon_model_free(model);
  return exit_code;
}
