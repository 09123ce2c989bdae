/* The stop rules of photon.h seen from C, on the shipped model (trained, real text), in RecGen and
 * HierGen: stop strings that span pieces, within one call or across calls, a prefill or a save;
 * the pull loop's -1 after one; the next call after each stop; a full context; cancellation of a
 * generate call and of a pull loop, from the loop's thread and from another thread. Expectations
 * come from an uninterrupted run of the same sampler (one call, nothing to stop it but its budget)
 * and photon_model_detokenize of its prefixes, never from the engine's own matching.
 *
 *   photon_c_stop_rules_test MODEL.photon */
#define _POSIX_C_SOURCE 200809L
#include <photon.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUN 120 /* tokens of the uninterrupted run */
#define MORE 6  /* the budget of a call after a stop */

static int g_passed = 0;
static int g_failed = 0;
static const char *g_mode = "";

static void record(int ok, const char *expression, int line) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "test_stop_rules.c:%d (%s): CHECK(%s) failed; last error: %s\n", line, g_mode,
            expression, photon_last_error());
  }
}
#define CHECK(expression) record((expression) != 0, #expression, __LINE__)

static photon_model *g_model = NULL;
static int32_t g_prompt[64];
static size_t g_prompt_len = 0;

/* The text `ids` (n of them) generate after the first `before`; the caller frees it. */
static char *generated_text(const int32_t *ids, size_t before, size_t n) {
  size_t head = 0, all = 0;
  char *text;
  photon_model_detokenize(g_model, ids, before, NULL, 0, &head);
  photon_model_detokenize(g_model, ids, before + n, NULL, 0, &all);
  text = malloc(all + 1);
  if (text == NULL) abort();
  CHECK(photon_model_detokenize(g_model, ids, before + n, text, all + 1, &all) == PHOTON_OK);
  memmove(text, text + head, all - head + 1);
  return text;
}

/* The uninterrupted run of a session of `mode` with `history` (n_history tokens) before it. */
typedef struct {
  int32_t tokens[RUN];
  char *text[RUN]; /* the generated text after tokens[0..j] */
  int n;
} reference;

static int collect(void *user, int32_t token, const char *piece, size_t len, float logprob) {
  reference *r = user;
  (void)piece;
  (void)len;
  (void)logprob;
  if (r->n < RUN) r->tokens[r->n++] = token;
  return 0;
}

static photon_session *make_session(photon_mode mode, const char *stop, int32_t context) {
  photon_session_options *o = NULL;
  photon_session *s = NULL;
  CHECK(photon_session_options_create(&o) == PHOTON_OK);
  photon_session_options_set_mode(o, mode);
  photon_session_options_set_temperature(o, 0.8f);
  photon_session_options_set_seed(o, 5);
  photon_session_options_set_ignore_eos(o, 1);
  photon_session_options_set_context_length(o, context);
  if (stop != NULL) CHECK(photon_session_options_add_stop_string(o, stop) == PHOTON_OK);
  CHECK(photon_session_create(g_model, o, &s) == PHOTON_OK);
  photon_session_options_free(o);
  if (s != NULL) CHECK(photon_session_prefill(s, g_prompt, g_prompt_len) == PHOTON_OK);
  return s;
}

static void reference_run(photon_session *s, reference *r, int32_t *history, size_t n_history) {
  int i;
  int32_t ids[512];
  r->n = 0;
  CHECK(photon_session_generate(s, RUN, collect, r, NULL) == PHOTON_OK);
  CHECK(r->n == RUN);
  memcpy(ids, history, n_history * sizeof *ids);
  memcpy(ids + n_history, r->tokens, (size_t)r->n * sizeof *ids);
  for (i = 0; i < r->n; ++i) r->text[i] = generated_text(ids, n_history, (size_t)i + 1);
}

static void free_reference(reference *r) {
  int i;
  for (i = 0; i < r->n; ++i) free(r->text[i]);
  r->n = 0;
}

static size_t occurrences(const char *text, const char *stop) {
  size_t n = 0;
  const char *at;
  for (at = strstr(text, stop); at != NULL; at = strstr(at + 1, stop)) ++n;
  return n;
}

/* The first token from `from` on after which the run's text holds one more occurrence of `stop`
 * than before it; -1 if none. */
static int stop_at(const reference *r, const char *stop, int from) {
  int j;
  for (j = from; j < r->n; ++j)
    if (occurrences(r->text[j], stop) > (j == 0 ? 0 : occurrences(r->text[j - 1], stop))) return j;
  return -1;
}

/* Where the text tokens[j] adds begins (the run's text is ASCII where this is used). */
static size_t added_at(const reference *r, int j) {
  size_t n = 0;
  if (j == 0) return 0;
  while (r->text[j - 1][n] != '\0' && r->text[j - 1][n] == r->text[j][n]) ++n;
  return n;
}

static int ascii(const char *text, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i)
    if ((unsigned char)text[i] >= 0x80 || text[i] == '\0') return 0;
  return 1;
}

/* A stop string of the run: up to 3 characters before token j's text and up to 2 of it, first
 * completed at j, and not inside j's text alone. Returns j, or -1 if the run has none. */
static int choose_stop(const reference *r, char *stop, int from) {
  int j;
  for (j = from; j + 2 * MORE < r->n; ++j) {
    const char *t = r->text[j];
    size_t a = added_at(r, j), len = strlen(t), b = a >= 3 ? a - 3 : 0;
    size_t e = a + 2 <= len ? a + 2 : len;
    if (a == 0 || e == a || !ascii(t + b, e - b)) continue;
    memcpy(stop, t + b, e - b);
    stop[e - b] = '\0';
    if (stop_at(r, stop, 0) == j && strstr(t + a, stop) == NULL) return j;
  }
  return -1;
}

/* A generate call: the callback cancels at the token of index cancel_at. */
typedef struct {
  photon_session *session;
  int cancel_at;
  int32_t tokens[RUN];
  int n;
} call;

static int on_token(void *user, int32_t token, const char *piece, size_t len, float logprob) {
  call *c = user;
  (void)piece;
  (void)len;
  (void)logprob;
  if (c->n < RUN) c->tokens[c->n++] = token;
  if (c->n - 1 == c->cancel_at) photon_session_cancel(c->session);
  return 0;
}

static void generate(photon_session *s, int max_tokens, int cancel_at, call *c) {
  int32_t n = -1;
  c->session = s;
  c->cancel_at = cancel_at;
  c->n = 0;
  CHECK(photon_session_generate(s, max_tokens, on_token, c, &n) == PHOTON_OK);
  CHECK(n == c->n);
}

/* Up to max_tokens pulls, until one returns -1. */
static void pull(photon_session *s, int max_tokens, call *c) {
  int i;
  c->n = 0;
  for (i = 0; i < max_tokens; ++i) {
    int32_t token = -2;
    char piece[256];
    size_t len = 0;
    CHECK(photon_session_next_token(s, &token, piece, sizeof piece, &len, NULL) == PHOTON_OK);
    if (token < 0) break;
    c->tokens[c->n++] = token;
  }
}

/* The call delivered tokens [from, to) of the run. */
static int delivered(const call *c, const reference *r, int from, int to) {
  return c->n == to - from &&
         memcmp(c->tokens, r->tokens + from, (size_t)c->n * sizeof *c->tokens) == 0;
}

static void test_stop_strings(photon_mode mode, const reference *r) {
  char stop[8];
  call c;
  int k = choose_stop(r, stop, 8), next;
  photon_session *s;
  CHECK(k >= 0);
  if (k < 0) return;
  next = stop_at(r, stop, k + 1);
  /* A generate call stops at the token that completes it; the next goes on. */
  s = make_session(mode, stop, 0);
  generate(s, RUN - 2 * MORE, -1, &c);
  CHECK(delivered(&c, r, 0, k + 1) && photon_session_stop_reason(s) == PHOTON_STOP_STRING);
  generate(s, MORE, -1, &c);
  if (next >= 0 && next <= k + MORE) {
    CHECK(delivered(&c, r, k + 1, next + 1));
  } else {
    CHECK(delivered(&c, r, k + 1, k + 1 + MORE));
    CHECK(photon_session_stop_reason(s) == PHOTON_STOP_LENGTH);
  }
  photon_session_free(s);
  /* A pull loop gets the token, then -1; the pull after that goes on, with no stop reason. */
  s = make_session(mode, stop, 0);
  pull(s, RUN - 2 * MORE, &c);
  CHECK(delivered(&c, r, 0, k + 1) && photon_session_stop_reason(s) == PHOTON_STOP_STRING);
  pull(s, 1, &c);
  CHECK(delivered(&c, r, k + 1, k + 2));
  CHECK(photon_session_stop_reason(s) == (next == k + 1 ? PHOTON_STOP_STRING : PHOTON_STOP_NONE));
  photon_session_free(s);
  /* Across calls: a budget that ends inside it leaves it for the next call's first token. */
  s = make_session(mode, stop, 0);
  generate(s, k, -1, &c);
  CHECK(delivered(&c, r, 0, k) && photon_session_stop_reason(s) == PHOTON_STOP_LENGTH);
  pull(s, MORE, &c);
  CHECK(delivered(&c, r, k, k + 1) && photon_session_stop_reason(s) == PHOTON_STOP_STRING);
  photon_session_free(s);
  /* Across a save: the restored session completes it where the original would have. */
  s = make_session(mode, stop, 0);
  generate(s, k, -1, &c);
  {
    size_t size = 0;
    void *state;
    photon_session *restored = NULL;
    CHECK(photon_session_save(s, NULL, 0, &size) == PHOTON_ERR_BUFFER_TOO_SMALL);
    state = malloc(size);
    if (state == NULL) abort();
    CHECK(photon_session_save(s, state, size, &size) == PHOTON_OK);
    CHECK(photon_session_restore(g_model, state, size, &restored) == PHOTON_OK);
    free(state);
    if (restored != NULL) {
      generate(restored, MORE, -1, &c);
      CHECK(delivered(&c, r, k, k + 1));
      CHECK(photon_session_stop_reason(restored) == PHOTON_STOP_STRING);
    }
    photon_session_free(restored);
  }
  photon_session_free(s);
}

/* A prefill interrupts the generated text: a stop string made of the end of the text before it
 * and the start of the text after it does not stop the call after it there. */
static void test_prefill_restarts_the_text(photon_mode mode, const reference *r) {
  int32_t history[512], turn[16];
  size_t n_turn = 0, n_history;
  const int before = 12;
  char stop[8];
  reference after;
  photon_session *mirror, *s;
  call c;
  size_t head_len = strlen(r->text[before - 1]);
  int at;
  CHECK(photon_model_tokenize(g_model, " And he said", 12, 0, turn, 16, &n_turn) == PHOTON_OK);
  /* The continuation, from a session that takes the same steps without the stop string. */
  mirror = make_session(mode, NULL, 0);
  CHECK(photon_session_generate(mirror, before, NULL, NULL, NULL) == PHOTON_OK);
  CHECK(photon_session_prefill(mirror, turn, n_turn) == PHOTON_OK);
  memcpy(history, g_prompt, g_prompt_len * sizeof *history);
  memcpy(history + g_prompt_len, r->tokens, (size_t)before * sizeof *history);
  memcpy(history + g_prompt_len + before, turn, n_turn * sizeof *history);
  n_history = g_prompt_len + (size_t)before + n_turn;
  reference_run(mirror, &after, history, n_history);
  photon_session_free(mirror);
  CHECK(head_len >= 3 && strlen(after.text[0]) >= 1);
  if (head_len < 3 || after.text[0][0] == '\0') {
    free_reference(&after);
    return;
  }
  memcpy(stop, r->text[before - 1] + head_len - 3, 3);
  stop[3] = after.text[0][0];
  stop[4] = '\0';
  at = stop_at(&after, stop, 0);
  CHECK(at != 0 && (stop_at(r, stop, 0) < 0 || stop_at(r, stop, 0) >= before));
  s = make_session(mode, stop, 0);
  generate(s, before, -1, &c);
  CHECK(delivered(&c, r, 0, before));
  CHECK(photon_session_prefill(s, turn, n_turn) == PHOTON_OK);
  generate(s, 2 * MORE, -1, &c);
  if (at >= 0 && at < 2 * MORE) {
    CHECK(delivered(&c, &after, 0, at + 1));
    CHECK(photon_session_stop_reason(s) == PHOTON_STOP_STRING);
  } else {
    CHECK(delivered(&c, &after, 0, 2 * MORE));
    CHECK(photon_session_stop_reason(s) == PHOTON_STOP_LENGTH);
  }
  photon_session_free(s);
  free_reference(&after);
}

static void test_context_full(photon_mode mode, const reference *r) {
  const int room = 6;
  call c;
  photon_session *s = make_session(mode, NULL, (int32_t)g_prompt_len + room);
  generate(s, 20, -1, &c);
  CHECK(delivered(&c, r, 0, room));
  CHECK(photon_session_stop_reason(s) == PHOTON_STOP_CONTEXT_FULL);
  generate(s, 20, -1, &c);
  CHECK(c.n == 0 && photon_session_stop_reason(s) == PHOTON_STOP_CONTEXT_FULL);
  pull(s, 5, &c);
  CHECK(c.n == 0 && photon_session_stop_reason(s) == PHOTON_STOP_CONTEXT_FULL);
  photon_session_free(s);
}

/* Waits (bounded: a minute) until *flag is set. */
static int wait_for(const volatile int *flag, pthread_mutex_t *lock) {
  struct timespec start, now, nap = {0, 1000000};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int set;
    pthread_mutex_lock(lock);
    set = *flag;
    pthread_mutex_unlock(lock);
    if (set) return 1;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 60) return 0;
    nanosleep(&nap, NULL);
  }
}

typedef struct {
  photon_session *session;
  pthread_mutex_t lock;
  int third;     /* the loop holds its third token */
  int cancelled; /* the other thread cancelled */
} handover;

static void *cancel_at_third(void *user) {
  handover *h = user;
  if (wait_for(&h->third, &h->lock)) photon_session_cancel(h->session);
  pthread_mutex_lock(&h->lock);
  h->cancelled = 1;
  pthread_mutex_unlock(&h->lock);
  return NULL;
}

static void test_cancel(photon_mode mode, const reference *r) {
  /* From a callback at the last token of a level-1 window: in RecGen the next window's tokens are
   * sampled already, and the cancellation stops before them too. */
  const int window = 32;
  int at = (int)((window - 1 - (int)g_prompt_len % window + window) % window);
  call c;
  photon_session *s = make_session(mode, NULL, 0);
  handover h;
  pthread_t thread;
  if (at < 3) at += window;
  generate(s, RUN, at, &c);
  CHECK(delivered(&c, r, 0, at + 1));
  CHECK(photon_session_stop_reason(s) == PHOTON_STOP_CANCELLED);
  generate(s, 2, -1, &c); /* answered: the next call goes on */
  CHECK(delivered(&c, r, at + 1, at + 3));
  photon_session_free(s);
  /* A pull loop: a request made between pulls, or before the loop, stops it at the next pull;
   * that answers it, and pulling again resumes. */
  s = make_session(mode, NULL, 0);
  pull(s, 3, &c);
  photon_session_cancel(s);
  pull(s, MORE, &c);
  CHECK(c.n == 0 && photon_session_stop_reason(s) == PHOTON_STOP_CANCELLED);
  photon_session_cancel(s);
  pull(s, MORE, &c);
  CHECK(c.n == 0 && photon_session_stop_reason(s) == PHOTON_STOP_CANCELLED);
  pull(s, 2, &c);
  CHECK(delivered(&c, r, 3, 5) && photon_session_stop_reason(s) == PHOTON_STOP_NONE);
  photon_session_cancel(s); /* made before a generate call: it discards the request */
  generate(s, 2, -1, &c);
  CHECK(delivered(&c, r, 5, 7) && photon_session_stop_reason(s) == PHOTON_STOP_LENGTH);
  photon_session_free(s);
  /* From another thread, while the loop waits at its third token. */
  s = make_session(mode, NULL, 0);
  h.session = s;
  h.third = 0;
  h.cancelled = 0;
  pthread_mutex_init(&h.lock, NULL);
  CHECK(pthread_create(&thread, NULL, cancel_at_third, &h) == 0);
  c.n = 0;
  while (c.n < 200) {
    int32_t token = -2;
    size_t len = 0;
    CHECK(photon_session_next_token(s, &token, NULL, 0, &len, NULL) == PHOTON_OK);
    if (token < 0) break;
    if (c.n < RUN) c.tokens[c.n] = token;
    if (++c.n == 3) {
      pthread_mutex_lock(&h.lock);
      h.third = 1;
      pthread_mutex_unlock(&h.lock);
      CHECK(wait_for(&h.cancelled, &h.lock));
    }
  }
  pthread_mutex_lock(&h.lock);
  h.third = 1; /* the loop may have ended early: let the thread go */
  pthread_mutex_unlock(&h.lock);
  pthread_join(thread, NULL);
  pthread_mutex_destroy(&h.lock);
  CHECK(delivered(&c, r, 0, 3) && photon_session_stop_reason(s) == PHOTON_STOP_CANCELLED);
  photon_session_free(s);
}

int main(int argc, char **argv) {
  static const photon_mode modes[] = {PHOTON_MODE_RECGEN, PHOTON_MODE_HIERGEN};
  static const char *const names[] = {"RecGen", "HierGen"};
  static const char prompt[] = "And God said";
  size_t i;
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.photon\n", argv[0]);
    return 2;
  }
  if (photon_model_load(argv[1], NULL, &g_model) != PHOTON_OK) {
    fprintf(stderr, "cannot load %s: %s\n", argv[1], photon_last_error());
    return 1;
  }
  CHECK(photon_model_tokenize(g_model, prompt, sizeof prompt - 1, 1, g_prompt, 64, &g_prompt_len) ==
        PHOTON_OK);
  for (i = 0; i < sizeof modes / sizeof modes[0]; ++i) {
    reference r;
    photon_session *s = make_session(modes[i], NULL, 0);
    g_mode = names[i];
    reference_run(s, &r, g_prompt, g_prompt_len);
    photon_session_free(s);
    test_stop_strings(modes[i], &r);
    test_prefill_restarts_the_text(modes[i], &r);
    test_context_full(modes[i], &r);
    test_cancel(modes[i], &r);
    free_reference(&r);
  }
  photon_model_free(g_model);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
