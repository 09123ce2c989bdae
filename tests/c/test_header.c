/*
 * Plain-C test of photon.h: the header compiles as strict C11, and the library honours the
 * contract the header documents (versions, status names, NULL handling, option validation, error
 * messages, the buffer-size protocol). With a scratch directory as argv[1] it also writes a small
 * random model and exercises loading, tokenizing, scoring and generating through the C ABI.
 *
 * Prints "N passed, N failed"; the exit status is non-zero when a check failed.
 */
#include <math.h>
#include <photon.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_passed = 0;
static int g_failed = 0;

static void record(int ok, const char *expression, const char *file, int line) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expression);
  }
}

#define CHECK(expression) record((expression) ? 1 : 0, #expression, __FILE__, __LINE__)
#define CHECK_STATUS(call, expected) \
  record((call) == (expected), #call " == " #expected, __FILE__, __LINE__)

static int contains(const char *text, const char *part) {
  return text != NULL && strstr(text, part) != NULL;
}

static void test_versions(void) {
  char expected[32];
  CHECK(strcmp(photon_version(), PHOTON_VERSION_STRING) == 0);
  CHECK(photon_version_number() == PHOTON_VERSION_NUMBER);
  CHECK(PHOTON_VERSION_NUMBER ==
        PHOTON_VERSION_MAJOR * 10000 + PHOTON_VERSION_MINOR * 100 + PHOTON_VERSION_PATCH);
  snprintf(expected, sizeof expected, "%d.%d.%d", PHOTON_VERSION_MAJOR, PHOTON_VERSION_MINOR,
           PHOTON_VERSION_PATCH);
  CHECK(strcmp(PHOTON_VERSION_STRING, expected) == 0);
}

static void test_status_names(void) {
  static const struct {
    photon_status status;
    const char *name;
  } names[] = {
      {PHOTON_OK, "PHOTON_OK"},
      {PHOTON_ERR_INVALID_ARGUMENT, "PHOTON_ERR_INVALID_ARGUMENT"},
      {PHOTON_ERR_OUT_OF_MEMORY, "PHOTON_ERR_OUT_OF_MEMORY"},
      {PHOTON_ERR_IO, "PHOTON_ERR_IO"},
      {PHOTON_ERR_CANCELLED, "PHOTON_ERR_CANCELLED"},
      {PHOTON_ERR_BUFFER_TOO_SMALL, "PHOTON_ERR_BUFFER_TOO_SMALL"},
      {PHOTON_ERR_BAD_IDENTIFIER, "PHOTON_ERR_BAD_IDENTIFIER"},
      {PHOTON_ERR_UNSUPPORTED_VERSION, "PHOTON_ERR_UNSUPPORTED_VERSION"},
      {PHOTON_ERR_TRUNCATED, "PHOTON_ERR_TRUNCATED"},
      {PHOTON_ERR_CORRUPT, "PHOTON_ERR_CORRUPT"},
      {PHOTON_ERR_SIZE_OVERFLOW, "PHOTON_ERR_SIZE_OVERFLOW"},
      {PHOTON_ERR_TENSOR_BOUNDS, "PHOTON_ERR_TENSOR_BOUNDS"},
      {PHOTON_ERR_TENSOR_SHAPE, "PHOTON_ERR_TENSOR_SHAPE"},
      {PHOTON_ERR_TENSOR_SET, "PHOTON_ERR_TENSOR_SET"},
      {PHOTON_ERR_BAD_CONFIG, "PHOTON_ERR_BAD_CONFIG"},
      {PHOTON_ERR_TOKENIZER, "PHOTON_ERR_TOKENIZER"},
      {PHOTON_ERR_BAD_TOKEN, "PHOTON_ERR_BAD_TOKEN"},
      {PHOTON_ERR_CONTEXT_FULL, "PHOTON_ERR_CONTEXT_FULL"},
      {PHOTON_ERR_UNSUPPORTED, "PHOTON_ERR_UNSUPPORTED"},
      {PHOTON_ERR_WRONG_MODEL, "PHOTON_ERR_WRONG_MODEL"},
      {PHOTON_ERR_DEVICE, "PHOTON_ERR_DEVICE"},
      {PHOTON_ERR_BUSY, "PHOTON_ERR_BUSY"},
      {PHOTON_ERR_TIMEOUT, "PHOTON_ERR_TIMEOUT"},
      {PHOTON_ERR_NOT_FINITE, "PHOTON_ERR_NOT_FINITE"},
      {PHOTON_ERR_INTERNAL, "PHOTON_ERR_INTERNAL"},
  };
  size_t i;
  for (i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char *name = photon_status_name(names[i].status);
    if (name == NULL || strcmp(name, names[i].name) != 0) {
      fprintf(stderr, "status %d is named '%s', expected '%s'\n", (int)names[i].status,
              name != NULL ? name : "(null)", names[i].name);
      record(0, "photon_status_name", __FILE__, __LINE__);
    } else {
      record(1, "photon_status_name", __FILE__, __LINE__);
    }
  }
  CHECK(strcmp(photon_status_name((photon_status)77), "PHOTON_ERR_UNKNOWN") == 0);
  CHECK(strcmp(photon_status_name((photon_status)-1), "PHOTON_ERR_UNKNOWN") == 0);
}

/* Every free function accepts NULL, every getter answers NULL with its documented value, and every
 * fallible call refuses NULL handles with PHOTON_ERR_INVALID_ARGUMENT and a message. */
static void test_null_handling(void) {
  const char *name = "untouched";
  photon_dtype dtype = PHOTON_DTYPE_BF16;
  int32_t n_dims = 7;
  int64_t shape[PHOTON_MAX_DIMS] = {0, 0, 0, 0};
  uint64_t offset = 0, size = 0, encoder = 0, window = 0, count = 0;
  int32_t tokens[4] = {1, 2, 3, 4};
  float logprobs[4];
  char text[16];
  size_t n = 0;
  photon_session *session = (photon_session *)&n; /* a sentinel that must stay untouched */

  photon_model_free(NULL);
  photon_session_free(NULL);
  photon_session_options_free(NULL);
  photon_write_options_free(NULL);
  photon_load_options_free(NULL);
  photon_session_cancel(NULL);

  CHECK(strcmp(photon_model_arch(NULL), "") == 0);
  CHECK(photon_model_levels(NULL) == 0);
  CHECK(photon_model_parameter_count(NULL) == 0);
  CHECK(photon_model_vocab_size(NULL) == 0);
  CHECK(photon_model_context_length(NULL) == 0);
  CHECK(photon_model_bos(NULL) == -1);
  CHECK(photon_model_eos(NULL) == -1);
  CHECK(strcmp(photon_model_config_json(NULL), "") == 0);
  CHECK(photon_model_metadata(NULL, "producer") == NULL);
  CHECK(photon_model_tensor_count(NULL) == 0);
  CHECK(photon_model_data_offset(NULL) == 0);
  CHECK_STATUS(photon_model_tensor_info(NULL, 0, &name, &dtype, &n_dims, shape, &offset, &size),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(name, "untouched") == 0 && n_dims == 7);

  CHECK_STATUS(photon_model_tokenize(NULL, "a", 1, 1, tokens, 4, &n), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(photon_last_error()[0] != '\0');
  CHECK_STATUS(photon_model_detokenize(NULL, tokens, 1, text, sizeof text, &n),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_score(NULL, tokens, 4, logprobs), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_score_top(NULL, tokens, 4, NULL, 1, logprobs, tokens, logprobs),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_load(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_load_options_create(NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_load_options_set_progress(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_load_options_set_verify(NULL, 1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_tokenizer_model(NULL, text, sizeof text, &n),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_score_options_set_stride(NULL, 4), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_create(NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_dtype(NULL, PHOTON_DTYPE_F16), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_seed(NULL, 1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_tokenizer_file(NULL, "t.model"),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_metadata(NULL, "k", "v"), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_progress(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_convert(NULL, NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_convert_from(NULL, NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_convert_from("", NULL, "out.photon", NULL),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_init_random(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_preset_config(NULL, text, sizeof text, &n), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_config_parameter_count(NULL, &count), PHOTON_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(photon_session_options_create(NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_create(NULL, NULL, &session), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(session == (photon_session *)&n);
  CHECK(photon_session_position(NULL) == 0);
  CHECK(photon_session_stop_reason(NULL) == PHOTON_STOP_NONE);
  (void)photon_session_mode(NULL); /* undocumented value; it must only not crash */
  CHECK_STATUS(photon_session_prefill(NULL, tokens, 4), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_generate(NULL, 4, NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_tokens(NULL, tokens, 4, &n), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_kv_bytes(NULL, 1, &encoder, &window), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_memory(NULL, &encoder, &window, 0), PHOTON_ERR_INVALID_ARGUMENT);
}

static void test_session_options(void) {
  photon_session_options *options = NULL;
  CHECK_STATUS(photon_session_options_create(&options), PHOTON_OK);
  if (options == NULL) return;

  CHECK_STATUS(photon_session_options_set_temperature(NULL, 1.0f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_temperature(options, -0.5f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(photon_last_error()[0] != '\0');
  CHECK_STATUS(photon_session_options_set_temperature(options, NAN), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_temperature(options, 0.0f), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_temperature(options, 0.8f), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_top_p(NULL, 0.5f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_p(options, 0.0f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_p(options, 1.01f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_p(options, -0.5f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_p(options, NAN), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_p(options, 1.0f), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_top_p(options, 0.9f), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_min_p(NULL, 0.1f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_min_p(options, 1.0f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_min_p(options, 1.5f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_min_p(options, -0.1f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_min_p(options, NAN), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_min_p(options, 0.0f), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_min_p(options, 0.05f), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_repetition_penalty(NULL, 1.1f, 64),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_repetition_penalty(options, 0.9f, 64),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_repetition_penalty(options, NAN, 64),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_repetition_penalty(options, 1.0f, 64), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_repetition_penalty(options, 1.3f, 16), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_presence_penalty(NULL, 0.5f),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_presence_penalty(options, INFINITY),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_presence_penalty(options, -0.5f), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_frequency_penalty(NULL, 0.5f),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_frequency_penalty(options, NAN),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_frequency_penalty(options, 1.5f), PHOTON_OK);

  {
    const int32_t tokens[] = {7, 3, 7};
    const float biases[] = {1.0f, -100.0f, 2.0f};
    const int32_t negative[] = {-1};
    const float nan_bias[] = {NAN};
    CHECK_STATUS(photon_session_options_set_logit_bias(NULL, tokens, biases, 2),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, NULL, biases, 2),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, tokens, NULL, 2),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, tokens, biases, 3),
                 PHOTON_ERR_INVALID_ARGUMENT); /* token 7 twice */
    CHECK_STATUS(photon_session_options_set_logit_bias(options, negative, biases, 1),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, tokens, nan_bias, 1),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, tokens, biases, 2), PHOTON_OK);
    CHECK_STATUS(photon_session_options_set_logit_bias(options, NULL, NULL, 0), PHOTON_OK);
  }

  CHECK_STATUS(photon_session_options_set_top_logprobs(NULL, 2), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_logprobs(options, -1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_logprobs(options, PHOTON_MAX_TOP_LOGPROBS + 1),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_logprobs(options, PHOTON_MAX_TOP_LOGPROBS),
               PHOTON_OK);
  {
    size_t n = 7;
    CHECK_STATUS(photon_last_top_logprobs(NULL, NULL, 0, NULL), PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_last_top_logprobs(NULL, NULL, 4, &n), PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_last_top_logprobs(NULL, NULL, 0, &n), PHOTON_OK);
    CHECK(n == 0); /* no token was delivered to this thread */
  }

  CHECK_STATUS(photon_session_options_set_top_k(NULL, 4), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_top_k(options, 0), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_top_k(options, 40), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_mode(NULL, PHOTON_MODE_AUTO),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_mode(options, (photon_mode)9),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_mode(options, PHOTON_MODE_HIERGEN), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_context_length(NULL, 16), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_context_length(options, -1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_context_length(options, 0), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_context_length(options, 128), PHOTON_OK);

  CHECK_STATUS(photon_session_options_set_seed(NULL, 1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_seed(options, 42), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_ignore_eos(NULL, 1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_ignore_eos(options, 1), PHOTON_OK);
  CHECK_STATUS(photon_session_options_set_context_shift(NULL, 1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_set_context_shift(options, 1), PHOTON_OK);

  CHECK_STATUS(photon_session_options_add_stop_string(NULL, "x"), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_add_stop_string(options, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_add_stop_string(options, ""), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_session_options_add_stop_string(options, "\n\n"), PHOTON_OK);
  char longest[4098];
  memset(longest, 'x', 4097);
  longest[4097] = '\0';
  CHECK_STATUS(photon_session_options_add_stop_string(options, longest),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "4097 bytes"));
  longest[4096] = '\0';
  CHECK_STATUS(photon_session_options_add_stop_string(options, longest), PHOTON_OK);

  photon_session_options_free(options);
}

static void test_write_options(void) {
  photon_write_options *options = NULL;
  CHECK_STATUS(photon_write_options_create(&options), PHOTON_OK);
  if (options == NULL) return;
  CHECK_STATUS(photon_write_options_set_dtype(options, (photon_dtype)9),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_dtype(options, PHOTON_DTYPE_BF16), PHOTON_OK);
  CHECK_STATUS(photon_write_options_set_tokenizer_file(options, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_metadata(options, NULL, "v"), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_metadata(options, "k", NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_write_options_set_metadata(options, "source", "test_header.c"), PHOTON_OK);
  CHECK_STATUS(photon_write_options_set_seed(options, 7), PHOTON_OK);
  photon_write_options_free(options);
}

static void test_errors(void) {
  const char *missing = "/nonexistent-photon-dir/no-such-model.photon";
  photon_model *model = (photon_model *)&missing; /* a sentinel that must stay untouched */
  photon_load_options *options = NULL;

  CHECK_STATUS(photon_model_load(missing, NULL, &model), PHOTON_ERR_IO);
  CHECK(model == (photon_model *)&missing);
  CHECK(contains(photon_last_error(), missing));

  CHECK_STATUS(photon_load_options_create(&options), PHOTON_OK);
  CHECK_STATUS(photon_model_load(missing, options, &model), PHOTON_ERR_IO);
  photon_load_options_free(options);

  CHECK_STATUS(photon_session_options_set_top_p(NULL, 0.5f), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(photon_last_error()[0] != '\0');

  CHECK_STATUS(photon_model_convert("/nonexistent-photon-dir/config.json",
                                    "/nonexistent-photon-dir/weights.npz",
                                    "/nonexistent-photon-dir/out.photon", NULL),
               PHOTON_ERR_IO);
  CHECK(contains(photon_last_error(), "/nonexistent-photon-dir/"));
  CHECK_STATUS(photon_model_convert_from("/nonexistent-photon-dir/checkpoint", NULL,
                                         "/nonexistent-photon-dir/out.photon", NULL),
               PHOTON_ERR_IO);
  CHECK(contains(photon_last_error(), "/nonexistent-photon-dir/checkpoint"));
}

static void test_presets(void) {
  static const struct {
    const char *name;
    uint64_t parameters;
  } paper[] = {
      {"photon-600m", 646400768u},  {"photon-900m", 907164160u},  {"photon-1.2b", 1229533440u},
      {"block-600m", 629772416u},   {"block-900m", 887880448u},   {"block-1.2b", 1207397760u},
      {"vanilla-600m", 610915968u}, {"vanilla-900m", 867114752u}, {"vanilla-1.2b", 1184657280u},
  };
  char small_json[4096];
  size_t length = 0, needed = 0, count = 0, i;
  uint64_t parameters = 0;
  int found_small = 0;

  for (i = 0; photon_preset_name(i) != NULL; ++i) {
    if (strcmp(photon_preset_name(i), "photon-small") == 0) found_small = 1;
  }
  count = i;
  CHECK(count >= sizeof paper / sizeof paper[0] + 3);
  CHECK(found_small);

  for (i = 0; i < sizeof paper / sizeof paper[0]; ++i) {
    char *json;
    CHECK_STATUS(photon_preset_config(paper[i].name, NULL, 0, &needed),
                 PHOTON_ERR_BUFFER_TOO_SMALL);
    json = malloc(needed + 1);
    if (json == NULL) continue;
    CHECK_STATUS(photon_preset_config(paper[i].name, json, needed + 1, &length), PHOTON_OK);
    CHECK(length == needed && strlen(json) == needed);
    parameters = 0;
    CHECK_STATUS(photon_config_parameter_count(json, &parameters), PHOTON_OK);
    if (parameters != paper[i].parameters) {
      fprintf(stderr, "%s: %llu parameters, the paper says %llu\n", paper[i].name,
              (unsigned long long)parameters, (unsigned long long)paper[i].parameters);
    }
    CHECK(parameters == paper[i].parameters);
    free(json);
  }

  CHECK_STATUS(photon_preset_config("photon-small", small_json, 1, &needed),
               PHOTON_ERR_BUFFER_TOO_SMALL);
  CHECK(needed > 0);
  CHECK_STATUS(photon_preset_config("no-such-preset", small_json, sizeof small_json, &length),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "no-such-preset"));

  parameters = 12345;
  CHECK_STATUS(photon_config_parameter_count("{\"arch\": \"photon\"}", &parameters),
               PHOTON_ERR_BAD_CONFIG);
  CHECK(parameters == 12345);
  CHECK(photon_last_error()[0] != '\0');
  CHECK_STATUS(photon_config_parameter_count("not json", &parameters), PHOTON_ERR_BAD_CONFIG);
}

static int count_tokens(void *user_data, int32_t token, const char *piece, size_t piece_len,
                        float logprob) {
  int *count = (int *)user_data;
  (void)token;
  (void)piece;
  (void)piece_len;
  (void)logprob;
  ++*count;
  return 0;
}

/* The engine's options, NULL handling and argument checks, without a model. */
static void test_engine_contract(void) {
  photon_engine_options *options = NULL;
  photon_request_options *request_options = NULL;
  double value = -1.0;
  int32_t token = 0;
  size_t len = 0;
  const int32_t prompt[2] = {1, 2};

  photon_engine_free(NULL);
  photon_engine_options_free(NULL);
  photon_request_options_free(NULL);
  photon_request_free(NULL);
  photon_request_cancel(NULL);
  CHECK(photon_request_get_state(NULL) == PHOTON_REQUEST_FINISHED);
  CHECK(photon_request_stop_reason(NULL) == PHOTON_STOP_NONE);
  CHECK(strcmp(photon_request_error(NULL), "") == 0);
  CHECK_STATUS(photon_engine_create(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "photon_engine_create"));
  CHECK_STATUS(photon_engine_start(NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_stop(NULL, PHOTON_ENGINE_DRAIN), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_step(NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_get_stat(NULL, PHOTON_ENGINE_RUNNING, &value),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_submit(NULL, NULL, NULL), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_wait(NULL, 0), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_next_token(NULL, 0, &token, NULL, 0, &len, NULL),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_get_stat(NULL, PHOTON_REQUEST_PAUSES, &value),
               PHOTON_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(photon_engine_options_create(&options), PHOTON_OK);
  CHECK_STATUS(photon_engine_options_set_max_running(options, 0), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "max_running must be >= 1, got 0"));
  CHECK_STATUS(photon_engine_options_set_max_waiting(options, -1), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_options_set_step_tokens(options, 0), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_options_set_max_running(options, 4), PHOTON_OK);
  CHECK_STATUS(photon_engine_options_set_max_waiting(options, 0), PHOTON_OK);
  CHECK_STATUS(photon_engine_options_set_memory_budget(options, 1u << 20), PHOTON_OK);
  CHECK_STATUS(photon_engine_options_set_step_tokens(options, 64), PHOTON_OK);
  photon_engine_options_free(options);

  CHECK_STATUS(photon_request_options_create(&request_options), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_max_tokens(request_options, -2),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "max_tokens"));
  CHECK_STATUS(photon_request_options_set_prompt(request_options, NULL, 2),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_options_set_prompt(request_options, prompt, 2), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_prompt_text(request_options, "hi", 2, 1), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_state(request_options, NULL, 3),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_options_set_session_options(request_options, NULL),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_options_set_callback(request_options, NULL, NULL), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_finish_callback(request_options, NULL, NULL), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_finish_callback(NULL, NULL, NULL),
               PHOTON_ERR_INVALID_ARGUMENT);
  photon_request_options_free(request_options);
}

/* An engine stepped by this thread: a text prompt, pulled tokens, statistics and the state. */
static void test_engine_round_trip(photon_model *model) {
  photon_engine *engine = NULL;
  photon_request_options *o = NULL;
  photon_request *request = NULL, *second = NULL;
  int32_t left = -1, token = 0, pulled = 0, steps = 0;
  size_t len = 0, state_size = 0;
  float logprob = 1.0f;
  double value = -1.0;
  char piece[64];
  const char *prompt = "hello world";

  CHECK_STATUS(photon_engine_create(model, NULL, &engine), PHOTON_OK);
  if (engine == NULL) return;
  CHECK_STATUS(photon_request_options_create(&o), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_prompt_text(o, prompt, strlen(prompt), 1), PHOTON_OK);
  CHECK_STATUS(photon_request_options_set_max_tokens(o, 6), PHOTON_OK);
  CHECK_STATUS(photon_engine_submit(engine, o, &request), PHOTON_OK);
  CHECK(photon_request_get_state(request) == PHOTON_REQUEST_WAITING);
  CHECK_STATUS(photon_request_next_token(request, 0, &token, piece, sizeof piece, &len, NULL),
               PHOTON_ERR_TIMEOUT);
  CHECK_STATUS(photon_request_wait(request, 0), PHOTON_ERR_TIMEOUT);
  CHECK_STATUS(photon_request_save(request, NULL, 0, &state_size), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK(contains(photon_last_error(), "has not finished"));
  do {
    CHECK_STATUS(photon_engine_step(engine, &left), PHOTON_OK);
  } while (left > 0 && ++steps < 100);
  CHECK(left == 0);
  CHECK(photon_request_get_state(request) == PHOTON_REQUEST_FINISHED);
  CHECK(photon_request_stop_reason(request) == PHOTON_STOP_LENGTH ||
        photon_request_stop_reason(request) == PHOTON_STOP_EOS);
  CHECK(photon_request_status(request) == PHOTON_OK);
  for (;;) {
    CHECK_STATUS(photon_request_next_token(request, 0, &token, piece, sizeof piece, &len, &logprob),
                 PHOTON_OK);
    if (token < 0) break;
    CHECK(logprob <= 0.0f && len < sizeof piece && ++pulled <= 6);
  }
  CHECK_STATUS(photon_request_get_stat(request, PHOTON_REQUEST_GENERATED_TOKENS, &value),
               PHOTON_OK);
  CHECK(value == (double)pulled);
  CHECK_STATUS(photon_request_get_stat(request, PHOTON_REQUEST_QUEUE_SECONDS, &value), PHOTON_OK);
  CHECK(value >= 0.0);
  CHECK_STATUS(photon_request_get_stat(request, (photon_request_stat)99, &value),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_engine_get_stat(engine, PHOTON_ENGINE_FINISHED, &value), PHOTON_OK);
  CHECK(value == 1.0);
  CHECK_STATUS(photon_engine_get_stat(engine, (photon_engine_stat)99, &value),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_save(request, NULL, 0, &state_size), PHOTON_ERR_BUFFER_TOO_SMALL);
  CHECK(state_size > 0);

  /* A request with a callback cannot be pulled from; a worker serves it. */
  CHECK_STATUS(photon_request_options_set_callback(o, count_tokens, &pulled), PHOTON_OK);
  CHECK_STATUS(photon_engine_start(engine), PHOTON_OK);
  CHECK_STATUS(photon_engine_submit(engine, o, &second), PHOTON_OK);
  CHECK_STATUS(photon_request_next_token(second, 0, &token, NULL, 0, &len, NULL),
               PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_request_wait(second, -1), PHOTON_OK);
  CHECK_STATUS(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_OK);
  CHECK_STATUS(photon_engine_stop(engine, PHOTON_ENGINE_DRAIN), PHOTON_ERR_INVALID_ARGUMENT);
  photon_request_options_free(o);
  photon_request_free(request);
  photon_request_free(second);
  photon_engine_free(engine);
}

/* A small model written through the C API and used through it. */
static void test_model_round_trip(const char *scratch_dir) {
  char path[1024], json[4096];
  size_t json_len = 0, n = 0, needed = 0, i;
  uint64_t expected_parameters = 0, tensor_parameters = 0;
  photon_write_options *write_options = NULL;
  photon_model *model = NULL;
  photon_session *session = NULL;
  int32_t tokens[72]; /* room for one extra id after a 64-token prompt */
  float logprobs[72];
  int delivered = 0;
  char text[256];

  snprintf(path, sizeof path, "%s/c_api_small.photon", scratch_dir);
  CHECK_STATUS(photon_preset_config("photon-small", json, sizeof json, &json_len), PHOTON_OK);
  CHECK_STATUS(photon_config_parameter_count(json, &expected_parameters), PHOTON_OK);
  CHECK_STATUS(photon_write_options_create(&write_options), PHOTON_OK);
  CHECK_STATUS(photon_write_options_set_seed(write_options, 3), PHOTON_OK);
  CHECK_STATUS(photon_write_options_set_metadata(write_options, "source", "test_header.c"),
               PHOTON_OK);
  CHECK_STATUS(photon_model_init_random(json, path, write_options), PHOTON_OK);
  photon_write_options_free(write_options);

  if (photon_model_load(path, NULL, &model) != PHOTON_OK) {
    fprintf(stderr, "cannot load %s: %s\n", path, photon_last_error());
    record(0, "photon_model_load", __FILE__, __LINE__);
    return;
  }
  CHECK(strcmp(photon_model_arch(model), "photon") == 0);
  CHECK(photon_model_levels(model) == 2);
  CHECK(photon_model_parameter_count(model) == expected_parameters);
  CHECK(photon_model_vocab_size(model) > 0);
  CHECK(photon_model_context_length(model) > 0);
  CHECK(photon_model_bos(model) >= 0);
  CHECK(contains(photon_model_config_json(model), "\"levels\""));
  CHECK(contains(photon_model_metadata(model, "source"), "test_header.c"));
  CHECK(photon_model_metadata(model, "no-such-key") == NULL);
  CHECK(photon_model_data_offset(model) > 0);

  for (i = 0; i < photon_model_tensor_count(model); ++i) {
    const char *name = NULL;
    int32_t n_dims = 0, d;
    int64_t shape[PHOTON_MAX_DIMS];
    uint64_t elements = 1, offset = 0, size = 0;
    CHECK_STATUS(photon_model_tensor_info(model, i, &name, NULL, &n_dims, shape, &offset, &size),
                 PHOTON_OK);
    CHECK(name != NULL && n_dims >= 1 && n_dims <= PHOTON_MAX_DIMS);
    for (d = 0; d < n_dims; ++d) elements *= (uint64_t)shape[d];
    CHECK(size == elements * 4); /* f32 by default */
    CHECK(offset >= photon_model_data_offset(model));
    tensor_parameters += elements;
  }
  CHECK(tensor_parameters == expected_parameters);
  CHECK_STATUS(photon_model_tensor_info(model, photon_model_tensor_count(model), NULL, NULL, NULL,
                                        NULL, NULL, NULL),
               PHOTON_ERR_INVALID_ARGUMENT);

  /* The buffer-size protocol of tokenize and detokenize. */
  CHECK_STATUS(photon_model_tokenize(model, "hello world", 11, 1, NULL, 0, &needed),
               PHOTON_ERR_BUFFER_TOO_SMALL);
  CHECK(needed >= 2 && needed <= 64);
  CHECK_STATUS(photon_model_tokenize(model, "hello world", 11, 1, tokens, 64, &n), PHOTON_OK);
  CHECK(n == needed && tokens[0] == photon_model_bos(model));
  CHECK_STATUS(photon_model_detokenize(model, tokens, n, NULL, 0, &needed),
               PHOTON_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == 11);
  CHECK_STATUS(photon_model_detokenize(model, tokens, n, text, sizeof text, &needed), PHOTON_OK);
  CHECK(strcmp(text, "hello world") == 0);
  tokens[n] = photon_model_vocab_size(model);
  CHECK_STATUS(photon_model_detokenize(model, tokens, n + 1, text, sizeof text, &needed),
               PHOTON_ERR_BAD_TOKEN);

  /* Scoring: NaN first, finite negative log-probabilities after; bad ids refused. */
  CHECK_STATUS(photon_model_score(model, tokens, n, logprobs), PHOTON_OK);
  CHECK(isnan(logprobs[0]));
  for (i = 1; i < n; ++i) CHECK(isfinite(logprobs[i]) && logprobs[i] <= 0.0f);
  CHECK_STATUS(photon_model_score(model, tokens, 0, logprobs), PHOTON_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(photon_model_score(model, tokens, n + 1, logprobs), PHOTON_ERR_BAD_TOKEN);
  tokens[n] = -1;
  CHECK_STATUS(photon_model_score(model, tokens, n + 1, logprobs), PHOTON_ERR_BAD_TOKEN);
  {
    /* With one alternative per position: the likeliest, never less likely than the token. */
    int32_t top_ids[16];
    float top_logprobs[16];
    CHECK(n <= 16);
    CHECK_STATUS(photon_model_score_top(model, tokens, n, NULL, 1, logprobs, top_ids, top_logprobs),
                 PHOTON_OK);
    CHECK(top_ids[0] == -1 && isnan(top_logprobs[0]));
    for (i = 1; i < n; ++i)
      CHECK(top_ids[i] >= 0 && top_logprobs[i] >= logprobs[i] &&
            (top_ids[i] != tokens[i] || top_logprobs[i] == logprobs[i]));
    CHECK_STATUS(photon_model_score_top(model, tokens, n, NULL, 0, logprobs, top_ids, top_logprobs),
                 PHOTON_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(photon_model_score_top(model, tokens, n, NULL, 1, logprobs, NULL, top_logprobs),
                 PHOTON_ERR_INVALID_ARGUMENT);
  }

  /* The embedded tokenizer, asked for its size first. */
  CHECK_STATUS(photon_model_tokenizer_model(model, NULL, 0, &needed), PHOTON_ERR_BUFFER_TOO_SMALL);
  CHECK(needed > 256);

  /* A session: prefill, generate, history. */
  CHECK_STATUS(photon_session_create(model, NULL, &session), PHOTON_OK);
  if (session != NULL) {
    int32_t position = 0, pulled = 0;
    uint64_t encoder = 0, window = 0;
    CHECK(photon_session_stop_reason(session) == PHOTON_STOP_NONE);
    CHECK(photon_session_mode(session) == PHOTON_MODE_RECGEN);
    CHECK(photon_session_generate(session, 4, NULL, NULL, NULL) != PHOTON_OK); /* empty */
    CHECK_STATUS(photon_session_prefill(session, tokens, n + 1), PHOTON_ERR_BAD_TOKEN);
    CHECK(photon_session_position(session) == 0);
    CHECK_STATUS(photon_session_prefill(session, tokens, n), PHOTON_OK);
    CHECK(photon_session_position(session) == (int32_t)n);
    CHECK_STATUS(photon_session_generate(session, 5, count_tokens, &delivered, NULL), PHOTON_OK);
    position = photon_session_position(session);
    CHECK(position == (int32_t)n + delivered);
    CHECK(delivered == 5 || photon_session_stop_reason(session) == PHOTON_STOP_EOS);
    CHECK_STATUS(photon_session_tokens(session, NULL, 0, &needed), PHOTON_ERR_BUFFER_TOO_SMALL);
    CHECK(needed == (size_t)position);
    CHECK_STATUS(photon_session_kv_bytes(session, 2, &encoder, &window), PHOTON_OK);
    CHECK_STATUS(photon_session_kv_bytes(session, 3, &encoder, &window),
                 PHOTON_ERR_INVALID_ARGUMENT);
    photon_session_cancel(session); /* made before a generate call: it discards the request */
    delivered = 0;
    CHECK_STATUS(photon_session_generate(session, 2, count_tokens, &delivered, NULL), PHOTON_OK);
    CHECK(photon_session_stop_reason(session) != PHOTON_STOP_CANCELLED);
    /* A pull answers a request made before it: -1, nothing generated; the next pull goes on. */
    position = photon_session_position(session);
    photon_session_cancel(session);
    CHECK_STATUS(photon_session_next_token(session, &pulled, text, sizeof text, &needed, NULL),
                 PHOTON_OK);
    CHECK(pulled == -1 && needed == 0 && text[0] == '\0');
    CHECK(photon_session_stop_reason(session) == PHOTON_STOP_CANCELLED);
    CHECK(photon_session_position(session) == position);
    CHECK_STATUS(photon_session_next_token(session, &pulled, text, sizeof text, &needed, NULL),
                 PHOTON_OK);
    CHECK(pulled >= 0 && photon_session_position(session) == position + 1);
    CHECK(photon_session_stop_reason(session) == PHOTON_STOP_NONE);
    photon_session_free(session);
  }
  test_engine_round_trip(model);
  photon_model_free(model);
  remove(path);
}

int main(int argc, char **argv) {
  test_versions();
  test_status_names();
  test_null_handling();
  test_session_options();
  test_write_options();
  test_errors();
  test_presets();
  test_engine_contract();
  if (argc > 1) test_model_round_trip(argv[1]);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
