/*
 * photon.h -- the PHOTON SDK C API. This header is the reference: every call is documented here.
 *
 * PHOTON is a hierarchical language model: an encoder compresses tokens into coarse latent streams,
 * small local decoders expand them top-down, and recursive generation (RecGen) keeps only the
 * coarsest stream's KV cache while decoding. The same engine also runs the Block Transformer
 * (PHOTON with one level) and a plain LLaMA-style Transformer ("vanilla") for comparison.
 *
 * Objects
 *   photon_model    an immutable, loaded model file (weights memory-mapped, tokenizer inside).
 *   photon_session  one generation stream over a model: its token history, caches and sampler.
 *   photon_*_options  small builders for the settings of a call; they may be freed right after use.
 *
 * Errors
 *   Every fallible call returns a photon_status. On failure, photon_last_error() returns a message
 *   that names the offending input (file, tensor, argument); it stays readable on the calling
 *   thread until that thread's next failing call. No call aborts, exits or lets a C++ exception
 *   escape. Out-parameters are left untouched on failure unless a call says otherwise.
 *
 * Thread safety
 *   A photon_model is immutable after photon_model_load returns: any number of threads may use it
 *   at once (create sessions, tokenize, score). A photon_session must be used by one thread at a
 *   time; different sessions may run on different threads concurrently. The exceptions are
 *   documented per call (photon_session_cancel may be called from any thread). Options objects are
 *   not shared. photon_last_error() is per thread. On a GPU, the work of all threads on one model
 *   is issued to one device stream under a lock: threads are safe, and their steps take turns on
 *   the device.
 *
 * Compatibility
 *   The ABI grows only by adding functions and enum values. Settings live in opaque options objects
 *   with setters, so adding a setting never changes the layout of anything a caller compiled
 *   against. The library exports the functions declared here and no other symbol.
 *
 * Example: load a model and stream a completion.
 *
 *   #include <photon.h>
 *   #include <stdio.h>
 *
 *   static int on_token(void *user, int32_t token, const char *piece, size_t len, float logprob) {
 *       (void)user; (void)token; (void)logprob;
 *       fwrite(piece, 1, len, stdout);
 *       return 0;                                   // non-zero stops generation
 *   }
 *
 *   int main(void) {
 *       photon_model *model = NULL;
 *       photon_session *session = NULL;
 *       int32_t ids[256];
 *       size_t n = 0;
 *       if (photon_model_load("model.photon", NULL, &model) != PHOTON_OK ||
 *           photon_model_tokenize(model, "In the beginning", 16, 1, ids, 256, &n) != PHOTON_OK ||
 *           photon_session_create(model, NULL, &session) != PHOTON_OK ||
 *           photon_session_prefill(session, ids, n) != PHOTON_OK ||
 *           photon_session_generate(session, 64, on_token, NULL, NULL) != PHOTON_OK) {
 *           fprintf(stderr, "photon: %s\n", photon_last_error());
 *       }
 *       photon_session_free(session);               // free functions accept NULL
 *       photon_model_free(model);
 *       return 0;
 *   }
 */
#ifndef PHOTON_H
#define PHOTON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(PHOTON_BUILDING_LIBRARY)
#define PHOTON_API __declspec(dllexport)
#else
#define PHOTON_API __declspec(dllimport)
#endif
#else
#define PHOTON_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Version                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

#define PHOTON_VERSION_MAJOR 0
#define PHOTON_VERSION_MINOR 1
#define PHOTON_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, comparable with photon_version_number(). */
#define PHOTON_VERSION_NUMBER \
  (PHOTON_VERSION_MAJOR * 10000 + PHOTON_VERSION_MINOR * 100 + PHOTON_VERSION_PATCH)
#define PHOTON_VERSION_STRING "0.1.0"

/* The library's version as "MAJOR.MINOR.PATCH"; compare with PHOTON_VERSION_STRING to detect a
 * header/library mismatch. Never fails. */
PHOTON_API const char *photon_version(void);

/* The library's PHOTON_VERSION_NUMBER. Never fails. */
PHOTON_API uint32_t photon_version_number(void);

/* ---------------------------------------------------------------------------------------------- */
/* Status codes and errors                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef enum photon_status {
  PHOTON_OK = 0,
  PHOTON_ERR_INVALID_ARGUMENT = 1,     /* NULL handle, out-of-range setting, bad flag value */
  PHOTON_ERR_OUT_OF_MEMORY = 2,        /* a host or device allocation failed */
  PHOTON_ERR_IO = 3,                   /* a file could not be opened, mapped, read or written */
  PHOTON_ERR_CANCELLED = 4,            /* a progress callback or photon_session_cancel stopped it */
  PHOTON_ERR_BUFFER_TOO_SMALL = 5,     /* the caller's buffer is too small; the size was stored */
  PHOTON_ERR_BAD_IDENTIFIER = 10,      /* not a PHOTON model file (wrong magic / identifier) */
  PHOTON_ERR_UNSUPPORTED_VERSION = 11, /* written by a newer format version */
  PHOTON_ERR_TRUNCATED = 12,           /* the file or blob ends before its declared size */
  PHOTON_ERR_CORRUPT = 13,             /* the FlatBuffers verifier or a consistency check failed */
  PHOTON_ERR_SIZE_OVERFLOW = 14,       /* a dimension, count or size overflows 64-bit arithmetic */
  PHOTON_ERR_TENSOR_BOUNDS = 15,       /* a tensor's bytes lie outside the data section */
  PHOTON_ERR_TENSOR_SHAPE = 16,        /* a tensor's shape, size or dtype disagrees with config */
  PHOTON_ERR_TENSOR_SET = 17,          /* a tensor is missing, duplicated or not used by config */
  PHOTON_ERR_BAD_CONFIG = 18,          /* the model configuration is invalid */
  PHOTON_ERR_TOKENIZER = 19,           /* the embedded tokenizer is invalid or disagrees with V */
  PHOTON_ERR_BAD_TOKEN = 20,           /* a token id outside [0, vocab_size) */
  PHOTON_ERR_CONTEXT_FULL = 21,        /* the tokens would exceed the session's context length */
  PHOTON_ERR_UNSUPPORTED = 22,         /* valid but not supported, e.g. RecGen with one level */
  PHOTON_ERR_WRONG_MODEL = 23,         /* a session state made by a different model or tokenizer */
  PHOTON_ERR_DEVICE = 24,              /* the compute device failed or is not available */
  PHOTON_ERR_BUSY = 25,                /* an engine's waiting queue is full: submit again later */
  PHOTON_ERR_TIMEOUT = 26,             /* nothing happened within the call's timeout */
  PHOTON_ERR_NOT_FINITE = 27,          /* a weight or a computed value is NaN or infinite, or a
                                          weight overflows the storage type it is written in */
  PHOTON_ERR_INTERNAL = 99             /* a bug: please report it with the message */
} photon_status;

/* The symbolic name of a status, e.g. "PHOTON_ERR_TRUNCATED"; "PHOTON_ERR_UNKNOWN" for values this
 * version does not know. Never fails; the string is static. */
PHOTON_API const char *photon_status_name(photon_status status);

/* The message of the last call that failed on this thread ("" if none has). The pointer stays valid
 * until the next failing call on this thread. */
PHOTON_API const char *photon_last_error(void);

/* ---------------------------------------------------------------------------------------------- */
/* Models                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef struct photon_model photon_model;
typedef struct photon_load_options photon_load_options;

/* Called during photon_model_load with a fraction in [0, 1] that never decreases. Return non-zero
 * to cancel the load (photon_model_load then returns PHOTON_ERR_CANCELLED). */
typedef int (*photon_progress_callback)(void *user_data, float fraction);

/* Creates load options holding the defaults (no progress callback, device "cpu", threads 0). */
PHOTON_API photon_status photon_load_options_create(photon_load_options **out);
/* Frees load options; NULL is accepted. */
PHOTON_API void photon_load_options_free(photon_load_options *options);
/* Sets the progress callback (NULL to remove it); user_data is passed through unchanged. */
PHOTON_API photon_status photon_load_options_set_progress(photon_load_options *options,
                                                          photon_progress_callback callback,
                                                          void *user_data);
/* Sets the device the model runs on:
 *   "cpu"     the CPU (the default): f32 arithmetic, results reproducible on every machine;
 *             products use the widest vector kernels the processor has (AVX-512F, else
 *             AVX2 + FMA + F16C, else portable C++; int8 products AVX512-VNNI where it is
 *             there), the same bits with either vector set;
 *             the environment variable PHOTON_CPU_KERNELS=avx2 or =portable caps that choice
 *             (read once per process, to compare kernels or rule one out);
 *   "cuda"    the first CUDA GPU, "cuda:N" GPU number N (compute capability 8.0 or newer);
 *   "auto"    the first CUDA GPU when one can be used, else the CPU.
 * On a GPU the weight matrices are uploaded once, on first use, as bf16 (f16 files keep f16, f32
 * files are converted), and products run as photon_load_options_set_precision says (bf16 by
 * default there). KV caches live in device memory, allocated for each session's whole context
 * when it is created.
 * The CUDA backend is the module libphoton-cuda.so, loaded by photon_model_load when a GPU is asked
 * for (found next to libphoton, or at $PHOTON_CUDA_MODULE); libphoton itself needs no CUDA library.
 * Any other text fails here with PHOTON_ERR_INVALID_ARGUMENT; whether the device can be had is
 * decided by photon_model_load. The GPU tests (every op and whole models against the CPU, at both
 * precisions) passed on an NVIDIA H200 (docs/cuda.md says at which commit). */
PHOTON_API photon_status photon_load_options_set_device(photon_load_options *options,
                                                        const char *device);

/* Sets how products of activations and weights compute (every other op is the same either way):
 *   "exact"  activations enter each product in f32, as the CPU computes them; the default on the
 *            CPU. On a GPU each product takes them as two 16-bit terms (about 17 bits of each,
 *            twice the tensor-core work), and log-probabilities differ from the CPU's by up to
 *            about 2e-4 on the test models (the tests allow 5e-2);
 *   "bf16"   activations are rounded to bf16 (nearest even) before each product, which accumulates
 *            in f32, as PyTorch and serving engines compute: the default on a GPU (one tensor-core
 *            term). On the CPU it computes the same function in f32 arithmetic (a reference for
 *            the GPU's results); bf16 weights on a processor with a fast AVX512-BF16 dot product
 *            (AMD's Zen 4 and 5; Intel's Xeons issue it at half the rate of f32 arithmetic) are
 *            multiplied by it instead, in an order of its own (within f32 rounding, not the same
 *            bits as elsewhere) and faster than "exact" with several sessions or prompt rows.
 *            The shipped model's test perplexity stays within 1% of "exact" and its greedy
 *            tokens mostly agree (docs/quality.md);
 *   "int8"   the CPU only, for q8 models (photon_write_options_set_dtype): products with q8
 *            weights take the activations quantized per block of 32 values (a scale each, max |x|
 *            / 127, and integers rounded to nearest) and multiply them in integers, as llama.cpp
 *            computes its Q8_0 weights; every other product as "exact". Faster than "exact" on q8
 *            weights; the shipped model's test perplexity stays within 1% of "exact"
 *            (docs/quality.md). With device "auto" it chooses the CPU; with "cuda" loading fails
 *            with PHOTON_ERR_UNSUPPORTED.
 * Not set, the device decides: "exact" on the CPU, "bf16" on a GPU (what "auto" chose).
 * photon_model_precision says which one a loaded model uses. Any other text fails with
 * PHOTON_ERR_INVALID_ARGUMENT naming it. */
PHOTON_API photon_status photon_load_options_set_precision(photon_load_options *options,
                                                           const char *precision);

/* Sets the most CPU threads one call on the model computes with (a GPU model ignores it), the
 * calling thread included (default 0: every core the process may run on; more than that counts as
 * that). A call computes on its own thread and takes up to threads - 1 idle helpers from one pool
 * the SDK starts on first need (cores - 1 threads, asleep when idle); with 1 it starts none. Every
 * parallel part of the computation honours it. Each call counts the limit on its own: several
 * threads that each use a model (or different models) at once use up to threads each, so an
 * application that drives its sessions from N threads of its own gives 1 to use N cores without
 * oversubscribing. A model's results (tokens, log-probabilities, saved states) are the same for
 * every thread count. OMP_NUM_THREADS does not apply. Fails with PHOTON_ERR_INVALID_ARGUMENT for a
 * negative count. */
PHOTON_API photon_status photon_load_options_set_threads(photon_load_options *options,
                                                         int32_t threads);

/* Non-zero: photon_model_load also reads every weight once (default 0: loading maps the weights
 * and reads only what it needs), and fails with PHOTON_ERR_NOT_FINITE, naming the tensor and the
 * first element, where a weight is NaN or infinite (files written by photon_model_convert and
 * photon_model_init_random never hold one; a file made by other means may), and with
 * PHOTON_ERR_CORRUPT where the data section no longer matches the hash its header recorded when
 * it was written. The cost is one read of the whole file. */
PHOTON_API photon_status photon_load_options_set_verify(photon_load_options *options, int verify);

/* Loads and fully verifies a .photon model file: the FlatBuffers header, every size against the
 * real file length, and the tensor set against the configuration (names, shapes, dtypes). Weights
 * are memory-mapped and, on the CPU, used in place in their stored type (f32, f16 or bf16;
 * arithmetic in f32), so a loaded model's memory is about its file size. options may be NULL for
 * the defaults. On success *out owns the model; free it with photon_model_free. Fails with
 * PHOTON_ERR_IO, _BAD_IDENTIFIER, _UNSUPPORTED_VERSION, _TRUNCATED, _CORRUPT, _SIZE_OVERFLOW,
 * _TENSOR_BOUNDS, _TENSOR_SHAPE, _TENSOR_SET, _BAD_CONFIG, _TOKENIZER, _CANCELLED or
 * _OUT_OF_MEMORY (and, with photon_load_options_set_verify, _NOT_FINITE), with a message naming
 * the file and, where one is at fault, the tensor. With device "cuda" or "cuda:N" it fails with
 * PHOTON_ERR_DEVICE when the GPU cannot be had, and the message says what is missing: the CUDA
 * module ("no CUDA module": libphoton-cuda.so is neither beside libphoton nor at
 * $PHOTON_CUDA_MODULE; a build without CUDA has none), the CUDA libraries the module needs ("no
 * CUDA runtime"), a usable NVIDIA driver ("no CUDA driver") or the device ("no CUDA device"). */
PHOTON_API photon_status photon_model_load(const char *path, const photon_load_options *options,
                                           photon_model **out);

/* Frees a model; NULL is accepted. Every session of the model must have been freed first. */
PHOTON_API void photon_model_free(photon_model *model);

/* The device the model runs on: "cpu" or "cuda:N" (what "auto" chose). "" for NULL. */
PHOTON_API const char *photon_model_device(const photon_model *model);

/* How the model's products compute: "exact", "bf16" or "int8" (photon_load_options_set_precision,
 * or the device's default). "" for NULL. */
PHOTON_API const char *photon_model_precision(const photon_model *model);

/* Memory the model holds on its device, in bytes, as sqlite3_status64 reports it: *in_use what
 * its backend has allocated now, *peak the most it has held since the model was loaded or since a
 * call with reset_peak nonzero (which restarts the peak from *in_use after reading it). Counted:
 * weights the backend copied or converted, the caches and state of the model's sessions, and
 * scratch; not counted: the model file's mapping, which the CPU reads f32, bf16 and f16 weights
 * from in place. On the CPU the operating system backs a page when it is first written, so a
 * session's cache for a long context counts in full from its creation while the resident memory
 * grows as it fills; on a GPU it is device memory (the backend's pool may keep freed blocks for
 * reuse beyond this). Either pointer may be NULL. Fails with PHOTON_ERR_INVALID_ARGUMENT for a NULL
 * model. Safe to call while other threads use the model and its sessions. */
PHOTON_API photon_status photon_model_memory(const photon_model *model, uint64_t *in_use,
                                             uint64_t *peak, int reset_peak);

/* "photon" or "vanilla". Returns "" for NULL. */
PHOTON_API const char *photon_model_arch(const photon_model *model);
/* Number of PHOTON levels L (1 is the Block Transformer); 0 for vanilla or NULL. */
PHOTON_API int32_t photon_model_levels(const photon_model *model);
/* Exact number of parameters (the sum of every tensor's element count); 0 for NULL. */
PHOTON_API uint64_t photon_model_parameter_count(const photon_model *model);
/* Vocabulary size V; 0 for NULL. */
PHOTON_API int32_t photon_model_vocab_size(const photon_model *model);
/* The longest token sequence the model was configured for (config max_seq_len); 0 for NULL. */
PHOTON_API int32_t photon_model_context_length(const photon_model *model);
/* Ids of the tokenizer's special tokens; -1 when the tokenizer has none (or model is NULL). */
PHOTON_API int32_t photon_model_bos(const photon_model *model);
PHOTON_API int32_t photon_model_eos(const photon_model *model);
/* The full configuration as compact JSON in the interchange format (spec section 8); the string is
 * owned by the model. "" for NULL. */
PHOTON_API const char *photon_model_config_json(const photon_model *model);
/* A provenance value recorded in the file (e.g. "producer", "created", "source"), or NULL if
 * absent. The string is owned by the model. */
PHOTON_API const char *photon_model_metadata(const photon_model *model, const char *key);
/* Number of provenance entries in the file; 0 for NULL. */
PHOTON_API size_t photon_model_metadata_count(const photon_model *model);
/* Provenance entry `index` (0 .. count-1, in file order); key and value are owned by the model.
 * Fails with PHOTON_ERR_INVALID_ARGUMENT past the end. */
PHOTON_API photon_status photon_model_metadata_at(const photon_model *model, size_t index,
                                                  const char **key, const char **value);

/* Copies the model's embedded tokenizer: the serialized sentencepiece model (a .model file's
 * bytes, padded with unused pieces to the vocabulary size when the file was written), which
 * photon_write_options_set_tokenizer_file takes back to write another model with the same token
 * ids. If capacity is too small (buffer may then be NULL), returns PHOTON_ERR_BUFFER_TOO_SMALL
 * with *size set to the bytes needed; otherwise *size receives the bytes written. */
PHOTON_API photon_status photon_model_tokenizer_model(const photon_model *model, void *buffer,
                                                      size_t capacity, size_t *size);

/* Splits UTF-8 text (text_len bytes; need not be NUL-terminated) into token ids, with BOS first
 * when add_bos is non-zero. *n_tokens receives the number of ids. If capacity is too small (tokens
 * may then be NULL), nothing is written to tokens and the call returns PHOTON_ERR_BUFFER_TOO_SMALL
 * with *n_tokens set to the capacity needed. */
PHOTON_API photon_status photon_model_tokenize(const photon_model *model, const char *text,
                                               size_t text_len, int add_bos, int32_t *tokens,
                                               size_t capacity, size_t *n_tokens);

/* Turns token ids back into UTF-8 text (special tokens produce no text). Writes at most capacity
 * bytes including a terminating NUL; *text_len receives the length without the NUL. If capacity is
 * too small (text may then be NULL), returns PHOTON_ERR_BUFFER_TOO_SMALL with *text_len set to the
 * length needed, not counting the NUL. Fails with PHOTON_ERR_BAD_TOKEN for an id outside the
 * vocab. */
PHOTON_API photon_status photon_model_detokenize(const photon_model *model, const int32_t *tokens,
                                                 size_t n_tokens, char *text, size_t capacity,
                                                 size_t *text_len);

/* The raw bytes token adds to generated text when it follows the token `previous` (-1, or a token
 * without text such as BOS, at the start of the text, where a leading space is dropped): the bytes
 * photon_token_callback's pieces are made of, before a character split across tokens is put
 * together (a byte token gives its one byte). For naming alternatives (photon_last_top_logprobs).
 * text, capacity, *text_len and PHOTON_ERR_BUFFER_TOO_SMALL as photon_model_detokenize. */
PHOTON_API photon_status photon_model_token_piece(const photon_model *model, int32_t token,
                                                  int32_t previous, char *text, size_t capacity,
                                                  size_t *text_len);

/* Teacher-forced scoring: logprobs[i] = log p(tokens[i] | tokens[0..i-1]) for i >= 1, and
 * logprobs[0] = NaN (the first token, normally BOS, is not predicted). logprobs must hold n_tokens
 * floats. A sequence longer than the model's context length is scored in sliding windows, as
 * perplexity tools do: each window holds up to a context of tokens, windows start stride tokens
 * apart (half the context here; photon_score_options_set_stride), and each scores the tokens
 * after the previous window's end, so token i is then conditioned on the tokens before it in its
 * window only (at least context - stride of them) and every token after the first is scored once.
 * Thread-safe on a shared model. Fails with PHOTON_ERR_BAD_TOKEN, PHOTON_ERR_INVALID_ARGUMENT
 * (n_tokens == 0) or PHOTON_ERR_NOT_FINITE (a log-probability is NaN or infinite: the model's
 * weights hold a NaN or an infinity, or its activations overflow). */
PHOTON_API photon_status photon_model_score(const photon_model *model, const int32_t *tokens,
                                            size_t n_tokens, float *logprobs);

/* The model file's tensor table, for inspection. PHOTON_MAX_DIMS bounds a tensor's rank. */
#define PHOTON_MAX_DIMS 4

/* Storage types. PHOTON_DTYPE_Q8 holds each run of 32 values of a row in 34 bytes, a bf16 scale d
 * and 32 int8 q in [-127, 127] standing for d * q (per block d = max |w| / 127, rounded). It is a
 * weight type only, computed on the CPU (a GPU refuses it with PHOTON_ERR_UNSUPPORTED). */
typedef enum photon_dtype {
  PHOTON_DTYPE_F32 = 0,
  PHOTON_DTYPE_F16 = 1,
  PHOTON_DTYPE_BF16 = 2,
  PHOTON_DTYPE_Q8 = 3
} photon_dtype;

/* Number of tensors in the model file; 0 for NULL. */
PHOTON_API size_t photon_model_tensor_count(const photon_model *model);

/* Describes tensor `index` (0 .. count-1, in file order). Any out-pointer may be NULL. *name is
 * owned by the model; shape receives *n_dims values (at most PHOTON_MAX_DIMS); *offset is the byte
 * offset of the tensor's data from the start of the file and *size_bytes its length. */
PHOTON_API photon_status photon_model_tensor_info(const photon_model *model, size_t index,
                                                  const char **name, photon_dtype *dtype,
                                                  int32_t *n_dims, int64_t shape[PHOTON_MAX_DIMS],
                                                  uint64_t *offset, uint64_t *size_bytes);

/* Byte offset at which the file's raw tensor data section starts; 0 for NULL. */
PHOTON_API uint64_t photon_model_data_offset(const photon_model *model);

/* ---------------------------------------------------------------------------------------------- */
/* Writing model files: conversion and random initialisation                                      */
/* ---------------------------------------------------------------------------------------------- */

typedef struct photon_write_options photon_write_options;

/* Creates write options with the defaults: dtype f32, the SDK's built-in tokenizer, seed 0, no
 * extra metadata, no progress callback. */
PHOTON_API photon_status photon_write_options_create(photon_write_options **out);
/* Frees write options; NULL is accepted. */
PHOTON_API void photon_write_options_free(photon_write_options *options);
/* Storage dtype of the written weights (computation is always at least f32 on the CPU). With
 * PHOTON_DTYPE_Q8 the matrices whose rows are whole blocks of 32 are q8, other matrices f16 and
 * vectors (norms, biases) f32. */
PHOTON_API photon_status photon_write_options_set_dtype(photon_write_options *options,
                                                        photon_dtype dtype);
/* A sentencepiece .model file to embed instead of the built-in tokenizer. A tokenizer smaller than
 * the config's vocab_size is padded with unused pieces (ids that text never produces); a larger one
 * is refused with PHOTON_ERR_TOKENIZER. The file is read when the model is written. */
PHOTON_API photon_status photon_write_options_set_tokenizer_file(photon_write_options *options,
                                                                 const char *path);
/* Seed of photon_model_init_random's weights. */
PHOTON_API photon_status photon_write_options_set_seed(photon_write_options *options,
                                                       uint64_t seed);
/* Adds (or replaces) a provenance entry stored in the file's header. */
PHOTON_API photon_status photon_write_options_set_metadata(photon_write_options *options,
                                                           const char *key, const char *value);
/* Progress of the write, as for loading; non-zero from the callback cancels and removes the
 * file. */
PHOTON_API photon_status photon_write_options_set_progress(photon_write_options *options,
                                                           photon_progress_callback callback,
                                                           void *user_data);

/* Builds a .photon file from the interchange format of spec section 8: config.json and weights.npz
 * (float32 or float16 arrays named as in spec section 6, stored or deflated). Every tensor the
 * config needs must be present with its exact shape, and no other. options may be NULL. The output
 * is written to a temporary name and renamed, so a failed call never leaves a partial file at
 * out_path. */
PHOTON_API photon_status photon_model_convert(const char *config_json_path,
                                              const char *weights_npz_path, const char *out_path,
                                              const photon_write_options *options);

/* Builds a .photon file from a safetensors checkpoint or another .photon file. path is either
 *   a directory holding config.json, the weights (model.safetensors, or the shards that
 *   model.safetensors.index.json lists) and tokenizer.model, as Hugging Face and the SDK's trainer
 *   write them, or
 *   one .safetensors file, whose configuration config_json_path then gives, or
 *   a .photon model file (config_json_path NULL): its tensors are stored again as the options'
 *   dtype (to quantize a model to q8, or to widen one), with its configuration, its tokenizer
 *   (unless the options give one) and its metadata ("source" then names it).
 * config_json_path (NULL: path/config.json) is the SDK's configuration (spec section 8; tensors
 * named as in spec section 6, any architecture) or a Hugging Face config.json of
 * LlamaForCausalLM or MistralForCausalLM, which becomes a vanilla model (the fields and tensor
 * names it maps are listed in docs/model-files.md). What the engine cannot compute exactly is
 * refused with PHOTON_ERR_UNSUPPORTED naming the field: rope_scaling, a Mistral sliding_window
 * shorter than max_position_embeddings, attention_bias or mlp_bias, a hidden_act other than silu,
 * quantization_config, another architecture. Tensors may be F32, F16 or BF16 (stored as the
 * options' dtype); every tensor the configuration needs must be present with its exact shape, and
 * no other. The tokenizer is the options' tokenizer file, else tokenizer.model beside the weights,
 * else, for an SDK configuration only, the built-in one; a Hugging Face config's bos_token_id and
 * eos_token_id must be the tokenizer's (PHOTON_ERR_TOKENIZER otherwise). The weights are mapped and
 * converted one tensor at a time, so memory stays near the largest tensor (as f32), not the model.
 * The file's metadata records "source" (the directory's or file's name), "source.format" and
 * "source.config_sha256" (of config.json's bytes) unless the options set them. Damaged files fail
 * with PHOTON_ERR_IO, _TRUNCATED, _CORRUPT, _SIZE_OVERFLOW, _TENSOR_BOUNDS, _TENSOR_SHAPE or
 * _TENSOR_SET naming the file and tensor. options may be NULL. Written as photon_model_convert
 * writes: a failed call never leaves a partial file at out_path. */
PHOTON_API photon_status photon_model_convert_from(const char *path, const char *config_json_path,
                                                   const char *out_path,
                                                   const photon_write_options *options);

/* Writes a model with seeded random weights (normal, std 0.02, for matrices and embeddings; ones
 * for norms; zeros for biases) for the configuration given as JSON text (spec section 8), for tests
 * and benchmarks. options may be NULL. */
PHOTON_API photon_status photon_model_init_random(const char *config_json, const char *out_path,
                                                  const photon_write_options *options);

/* The name of built-in preset `index` (the paper's photon/block/vanilla 600m, 900m, 1.2b and small
 * CPU presets), or NULL past the end. */
PHOTON_API const char *photon_preset_name(size_t index);

/* Copies the configuration JSON of a preset into json (capacity bytes including the NUL), as
 * photon_model_detokenize for capacity and PHOTON_ERR_BUFFER_TOO_SMALL. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT for an unknown name. */
PHOTON_API photon_status photon_preset_config(const char *name, char *json, size_t capacity,
                                              size_t *json_len);

/* Exact parameter count of the configuration given as JSON text (for sizing before writing).
 * Fails with PHOTON_ERR_BAD_CONFIG naming the offending field. */
PHOTON_API photon_status photon_config_parameter_count(const char *config_json, uint64_t *count);

/* ---------------------------------------------------------------------------------------------- */
/* Sessions                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

typedef struct photon_session photon_session;
typedef struct photon_session_options photon_session_options;

typedef enum photon_mode {
  PHOTON_MODE_AUTO = 0,    /* the model's recommended mode (metadata "photon.default_mode":
                              "hiergen" or "recgen"), else RecGen for PHOTON with L >= 2, else
                              HierGen (vanilla: plain) */
  PHOTON_MODE_HIERGEN = 1, /* encoder-consistent: logits equal teacher forcing; KV at every level */
  PHOTON_MODE_RECGEN = 2   /* recursive generation: only the top level's KV cache is kept */
} photon_mode;

typedef enum photon_stop_reason {
  PHOTON_STOP_NONE = 0,         /* no generate call has finished yet */
  PHOTON_STOP_LENGTH = 1,       /* the call's token budget was reached */
  PHOTON_STOP_EOS = 2,          /* the model produced its end-of-sequence token */
  PHOTON_STOP_STRING = 3,       /* the text produced a configured stop string */
  PHOTON_STOP_CALLBACK = 4,     /* the token callback returned non-zero */
  PHOTON_STOP_CANCELLED = 5,    /* photon_session_cancel was called */
  PHOTON_STOP_CONTEXT_FULL = 6, /* the session's context length was reached */
  PHOTON_STOP_ERROR = 7         /* an engine request failed (photon_request_status says why) */
} photon_stop_reason;

/* Creates session options with the defaults: mode AUTO, context = the model's, seed 0, greedy
 * (temperature 0), top-k 0 (off), top-p 1 (off), min-p 0 (off), repetition penalty 1 (off) over the
 * last 64 tokens, stop at EOS, no stop strings. */
PHOTON_API photon_status photon_session_options_create(photon_session_options **out);
/* Frees session options; NULL is accepted. */
PHOTON_API void photon_session_options_free(photon_session_options *options);
PHOTON_API photon_status photon_session_options_set_mode(photon_session_options *options,
                                                         photon_mode mode);
/* Maximum tokens the session will hold (prompt plus generated), 1 .. the model's context length;
 * 0 means the model's. Caches are allocated for this length up front, never per token; on the CPU
 * the operating system backs them with memory only as positions are filled, so an unused context
 * costs address space, not resident memory. On a GPU the whole context is device memory from the
 * start, so give the length the session needs. */
PHOTON_API photon_status photon_session_options_set_context_length(photon_session_options *options,
                                                                   int32_t context_length);
/* Storage of the session's KV caches (every cache its mode keeps):
 *   PHOTON_DTYPE_F32 (the default): exact; the session computes what the model's specification
 *     does, to float precision.
 *   PHOTON_DTYPE_BF16, PHOTON_DTYPE_F16: half the memory per position, and half the bytes that
 *     attention reads at each step. Each key and value is rounded once, when it is stored (to
 *     nearest even; f16 keeps 3 more bits of precision, bf16 the range of f32). Attention still
 *     computes in f32. Log-probabilities then differ from an f32 session's by a few 1e-3 on
 *     typical models (docs/quality.md measures it). The log-probabilities that
 *     photon_session_prefill_logprobs gives HierGen and vanilla sessions come from teacher
 *     forcing with caches of their own, in f32, so they stay exact.
 * A saved state records the type; a restored session keeps it. Sessions of different types can be
 * batched together. */
PHOTON_API photon_status photon_session_options_set_kv_type(photon_session_options *options,
                                                            photon_dtype kv_type);
/* Sampling. Each token is chosen from the model's logits l (one per vocabulary id) in this order:
 *   0. Logit bias: each id given a bias b gets l + b.
 *   1. Penalties over the penalty window, the last last_n tokens of the history (prompt included;
 *      last_n as photon_session_options_set_repetition_penalty sets it, 64 by default): each
 *      distinct id that occurs c > 0 times in the window gets, with repetition penalty r,
 *      l' = (l > 0 ? l / r : l * r), then l' - fma(c, frequency, presence) (one rounding). Ids
 *      outside the window keep their logit.
 *   2. Temperature 0 (greedy): the token is the id with the largest logit after steps 0 and 1,
 *      the lowest id on ties; the steps below do not apply.
 *   3. Top-k (if 0 < k < vocabulary size): only the k ids with the largest logits stay (the
 *      lower id first on ties).
 *   4. Softmax at temperature T over the ids left: p_i = exp(l_i / T) / sum_j exp(l_j / T).
 *   5. Min-p and top-p, both over these p (that is, after the penalty, the temperature and
 *      top-k, normalized over the ids top-k kept), with the ids ranked by p (the lower id first
 *      on ties): min-p drops every id with p_i < min_p * max_j p_j; top-p keeps the shortest
 *      prefix of the ranking whose p sum to at least top_p. An id stays if both keep it; the
 *      most likely id always stays.
 *   6. The token is drawn from the ids left, with probabilities p renormalized over them, by a
 *      uniform random number that depends only on the seed and the token's position in the
 *      history. So batched, restored and RecGen's chunk-parallel decoding draw exactly the tokens
 *      one sequential session draws.
 * The logprob delivered with each token is log softmax(l) of the unmodified logits: temperature
 * 1, no penalty, no filter. */

/* Seed of the sampler's random generator. The same seed, model, tokens and settings give the same
 * output. */
PHOTON_API photon_status photon_session_options_set_seed(photon_session_options *options,
                                                         uint64_t seed);
/* Softmax temperature T >= 0 (step 4 above); 0 selects greedy decoding (step 2). */
PHOTON_API photon_status photon_session_options_set_temperature(photon_session_options *options,
                                                                float temperature);
/* Top-k (step 3): keep only the k ids with the largest logits; 0 disables. */
PHOTON_API photon_status photon_session_options_set_top_k(photon_session_options *options,
                                                          int32_t top_k);
/* Nucleus sampling (step 5): keep the most likely ids whose probabilities reach top_p, in (0, 1];
 * 1 disables. */
PHOTON_API photon_status photon_session_options_set_top_p(photon_session_options *options,
                                                          float top_p);
/* Min-p (step 5): drop ids whose probability is below min_p times the most likely id's, in [0, 1);
 * 0 disables. */
PHOTON_API photon_status photon_session_options_set_min_p(photon_session_options *options,
                                                          float min_p);
/* CTRL-style repetition penalty >= 1 (step 1; 1 disables), and last_n >= 0, the penalty window
 * of every penalty (0: none applies). With a penalty, RecGen decodes sibling windows one after
 * another, since each token then depends on the ones before it. */
PHOTON_API photon_status photon_session_options_set_repetition_penalty(
    photon_session_options *options, float penalty, int32_t last_n);
/* Presence and frequency penalties (step 1; 0 disables each), as OpenAI defines them but counted
 * over the penalty window: an id that occurs c times there loses presence + c * frequency.
 * Negative values favour repeats. Each must be finite. Like the repetition penalty, they make
 * RecGen decode sibling windows one after another. */
PHOTON_API photon_status
photon_session_options_set_presence_penalty(photon_session_options *options, float presence);
PHOTON_API photon_status
photon_session_options_set_frequency_penalty(photon_session_options *options, float frequency);
/* Logit bias (step 0): replaces the options' biases with count pairs (tokens[i], biases[i]);
 * count 0 clears them (the pointers may then be NULL). Tokens must be distinct and >= 0 (a session
 * refuses one outside its model's vocabulary when it is created or its sampler is set), biases
 * finite. A bias of -100 keeps an id from being chosen in practice; +100 all but forces it. */
PHOTON_API photon_status photon_session_options_set_logit_bias(photon_session_options *options,
                                                               const int32_t *tokens,
                                                               const float *biases, size_t count);
/* The most alternatives a token may report (photon_session_options_set_top_logprobs). */
#define PHOTON_MAX_TOP_LOGPROBS 20
/* Alternatives reported with each generated token: its position's k most likely ids and their
 * log-probabilities, as photon_last_top_logprobs gives them; 0 (the default) computes none, up to
 * PHOTON_MAX_TOP_LOGPROBS. They cost a copy of the position's logits to the host (on a GPU) and a
 * partial sort of the vocabulary per token. */
PHOTON_API photon_status photon_session_options_set_top_logprobs(photon_session_options *options,
                                                                 int32_t k);
/* Non-zero: do not stop at the end-of-sequence token (it is sampled like any other). */
PHOTON_API photon_status photon_session_options_set_ignore_eos(photon_session_options *options,
                                                               int ignore_eos);
/* Non-zero: generation goes on past a full context (default 0: it stops there with
 * PHOTON_STOP_CONTEXT_FULL). When the session holds as many tokens as its context length, it keeps
 * the last half of them, context_length / 2 tokens (rounded down), and prefills them again: from
 * then on it is exactly a new session of the same settings that was prefilled with those tokens
 * (caches rebuilt from them, the same draws at the same positions), and photon_session_position
 * and photon_session_tokens count from that tail. Text delivered before the shift still counts
 * for stop strings. Each shift costs a prefill of half the context, and the caches exist twice
 * while it runs. A context of 1 token cannot shift and stops. The setting is not part of a saved
 * state: a restored session has it off until photon_session_set_sampler turns it on. */
PHOTON_API photon_status photon_session_options_set_context_shift(photon_session_options *options,
                                                                  int context_shift);
/* Adds a stop string (UTF-8, non-empty, up to 4096 bytes): generation stops at the token that
 * completes it in the generated text, and that token is still delivered (the stop rules, before
 * photon_session_generate, say exactly how). */
PHOTON_API photon_status photon_session_options_add_stop_string(photon_session_options *options,
                                                                const char *stop);

/* Creates a session over a model. options may be NULL for the defaults. Fails with
 * PHOTON_ERR_UNSUPPORTED for RecGen on vanilla or on a one-level PHOTON model, and with
 * PHOTON_ERR_OUT_OF_MEMORY when its caches do not fit (on a GPU: the device's memory); the model
 * and its other sessions stay usable then. */
PHOTON_API photon_status photon_session_create(const photon_model *model,
                                               const photon_session_options *options,
                                               photon_session **out);
/* Frees a session; NULL is accepted. */
PHOTON_API void photon_session_free(photon_session *session);

/* The mode the session runs in (AUTO resolved to HIERGEN or RECGEN). */
PHOTON_API photon_mode photon_session_mode(const photon_session *session);
/* The storage of the session's KV caches (photon_session_options_set_kv_type); F32 for NULL. */
PHOTON_API photon_dtype photon_session_kv_type(const photon_session *session);

/* Consumes tokens into the session, in parallel, after whatever it holds already. The first
 * prefill of a session normally starts with BOS (photon_model_tokenize with add_bos). HierGen and
 * vanilla consume the tokens teacher-forced, and so does RecGen before it has generated. A RecGen
 * session that has generated takes more known tokens (the next turn of a chat) as it takes the
 * tokens it sampled: each one enters only its own level-1 window, the latents above stay RecGen's
 * own, and all windows of a level-2 unit run together (docs/model.md). Fails with
 * PHOTON_ERR_BAD_TOKEN, PHOTON_ERR_CONTEXT_FULL (the session is then unchanged) or
 * PHOTON_ERR_CANCELLED. Long prompts are consumed in slices of 512 tokens (a RecGen continuation
 * a level-2 unit at a time); photon_session_cancel stops between them: a HierGen or vanilla
 * session, or a RecGen continuation, keeps what it consumed so far (photon_session_position tells
 * how much), a RecGen prompt leaves the session as it was before the call. A RecGen session that
 * has not generated keeps no encoder cache below its top level and encodes its whole history
 * again with the new tokens: give a prompt in one call, not in pieces. */
PHOTON_API photon_status photon_session_prefill(photon_session *session, const int32_t *tokens,
                                                size_t n_tokens);

/* photon_session_prefill, also writing logprobs[i] = log p(tokens[i] | all tokens before it) as
 * the session conditions it (logprobs holds n_tokens floats; NaN for the first token of an empty
 * session). A RecGen continuation computes them on the way; otherwise they are teacher forcing's,
 * from a scoring pass over the session's whole history and the tokens. */
PHOTON_API photon_status photon_session_prefill_logprobs(photon_session *session,
                                                         const int32_t *tokens, size_t n_tokens,
                                                         float *logprobs);

/* Scoring in a generation mode: the log-probabilities a session of that mode assigns to a known
 * sequence. Options may be freed right after the call that uses them. */
typedef struct photon_score_options photon_score_options;

PHOTON_API photon_status photon_score_options_create(photon_score_options **out);
/* Frees options; NULL is accepted. */
PHOTON_API void photon_score_options_free(photon_score_options *options);
/* PHOTON_MODE_AUTO (the default) and PHOTON_MODE_HIERGEN score teacher-forced, as
 * photon_model_score. PHOTON_MODE_RECGEN scores as a RecGen session that was given the prompt
 * (below) and then consumed every later token as one it sampled; it needs PHOTON with L >= 2. */
PHOTON_API photon_status photon_score_options_set_mode(photon_score_options *options,
                                                       photon_mode mode);
/* The first n tokens are the prompt (n >= 1; default 1, BOS alone). Their log-probabilities, and
 * the next token's, are teacher forcing's in every mode; n >= n_tokens is teacher forcing
 * throughout. */
PHOTON_API photon_status photon_score_options_set_prompt_tokens(photon_score_options *options,
                                                                size_t n);

/* The stride of the sliding windows that score a sequence longer than the model's context (see
 * photon_model_score): window w covers tokens [w * stride, w * stride + context) (cut at the
 * sequence's end) and scores those after window w - 1's end; a window after the first starts
 * mid-text, without BOS, and in PHOTON_MODE_RECGEN its prompt is its part that the previous window
 * scored. 1 <= stride < context; 0 (the default) means half the context, rounded down. A smaller
 * stride gives each token more context and costs more windows: a sequence of n > context tokens
 * takes 1 + ceil((n - context) / stride) of them. Fails with PHOTON_ERR_INVALID_ARGUMENT for a
 * negative stride; one of the context or more fails in photon_model_score_with when windows are
 * needed. */
PHOTON_API photon_status photon_score_options_set_stride(photon_score_options *options,
                                                         int32_t stride);

/* photon_model_score under options (NULL: the defaults, which equal photon_model_score). Fails as
 * photon_model_score does, and with PHOTON_ERR_UNSUPPORTED for RecGen on a model without it. */
PHOTON_API photon_status photon_model_score_with(const photon_model *model, const int32_t *tokens,
                                                 size_t n_tokens,
                                                 const photon_score_options *options,
                                                 float *logprobs);

/* photon_model_score_with, also giving each position's alternatives, as an API's echoed prompt
 * shows them: top_tokens[i * k + j] and top_logprobs[i * k + j], j < k, are the k most likely ids
 * at position i (those tokens[i] was drawn from) and their log-probabilities, the most likely
 * first, the lower id first on ties. logprobs[i] equals tokens[i]'s value among them bit for bit
 * when it is there (so "was tokens[i] the greedy choice" is a comparison). Row 0 holds -1 and NaN.
 * top_tokens and top_logprobs hold n_tokens * k values each; 1 <= k <= the vocabulary. Scoring
 * with alternatives is teacher-forced: options in PHOTON_MODE_RECGEN fail with
 * PHOTON_ERR_UNSUPPORTED. It costs a copy of every position's logits to the host on a GPU. */
PHOTON_API photon_status photon_model_score_top(const photon_model *model, const int32_t *tokens,
                                                size_t n_tokens,
                                                const photon_score_options *options, int32_t k,
                                                float *logprobs, int32_t *top_tokens,
                                                float *top_logprobs);

/* Receives each generated token in order: its id, its text piece (UTF-8 complete: bytes of a
 * character split across tokens are held back until the character is whole, so a piece may be
 * empty), and log p(token) under the model's unmodified distribution. Return non-zero to stop. */
typedef int (*photon_token_callback)(void *user_data, int32_t token, const char *piece,
                                     size_t piece_len, float logprob);

/* The alternatives of the token last delivered to the calling thread: by a token callback while it
 * runs (photon_token_callback, photon_batch_callback, a request's callback), else by this thread's
 * last photon_session_next_token or photon_request_next_token that returned a token. They are the
 * k most likely ids of the token's position (k as photon_session_options_set_top_logprobs set it
 * for its session; at most the vocabulary) with their log-probabilities under the unmodified
 * distribution (as the token's own logprob, to float rounding), the most likely first, the lower
 * id first on ties. Writes the first min(k, capacity) of them to tokens and logprobs (either may
 * be NULL when capacity is 0) and k to *n; k is 0 before any token and for a session without
 * alternatives. Per thread, like photon_last_error. */
PHOTON_API photon_status photon_last_top_logprobs(int32_t *tokens, float *logprobs, size_t capacity,
                                                  size_t *n);

/* Stop rules, the same for photon_session_generate, photon_session_next_token and each session of
 * photon_session_generate_batch. A call delivers tokens one at a time, in position order. Before
 * each token it stops, with the first of these reasons that applies:
 *   PHOTON_STOP_LENGTH        the call has delivered max_tokens (pulls have no budget);
 *   PHOTON_STOP_CANCELLED     a cancellation is pending (see photon_session_cancel);
 *   PHOTON_STOP_CONTEXT_FULL  the session holds as many tokens as its context length and does
 *                             not shift its context (photon_session_options_set_context_shift);
 *   PHOTON_STOP_EOS           the next token is EOS and ignore-EOS is off; EOS is then neither
 *                             delivered nor added to the history.
 * A delivered token is part of the history. After delivering one the call stops with
 *   PHOTON_STOP_CALLBACK      if the callback returned non-zero for it, else with
 *   PHOTON_STOP_STRING        if its piece completes a stop string in the generated text.
 * The generated text is the pieces delivered since the session was created or last prefilled, by
 * every call and across context shifts (a restored session continues the text of the session it
 * was saved from; the prompt's text is not part of it). An occurrence of a stop string is found
 * once, at the token whose piece holds its last byte: it may begin pieces or calls earlier, and one
 * that ends in a character split across tokens completes with the token that completes the
 * character (the tokens that hold its first bytes deliver empty pieces). The next call after a
 * stop:
 *   after EOS or CONTEXT_FULL stops again at once, with the same reason, delivering nothing (EOS
 *     stays the next token until a prefill, or photon_session_set_sampler with ignore-EOS on,
 *     which then delivers it; a full context stays full until photon_session_set_sampler turns
 *     its context shift on);
 *   after LENGTH, CANCELLED, CALLBACK or STRING goes on with the tokens an uninterrupted call
 *     would have delivered next (tokens sampled ahead of the stop are kept for it); an occurrence
 *     that stopped a call does not stop the next one (but a pull loop that a stop string stopped
 *     ends with one more pull, which returns -1: photon_session_next_token).
 * photon_session_stop_reason reports the reason until the session's next generating call. */

/* Generates up to max_tokens tokens after the session's current history, calling callback (may be
 * NULL) for each, until a stop rule (above) applies; photon_session_stop_reason says which. Every
 * delivered token is part of the history, so a later call continues from it. *n_generated (may be
 * NULL) receives the number of tokens delivered. The session must hold at least one token. A
 * cancelled call returns PHOTON_OK with stop reason PHOTON_STOP_CANCELLED. */
PHOTON_API photon_status photon_session_generate(photon_session *session, int32_t max_tokens,
                                                 photon_token_callback callback, void *user_data,
                                                 int32_t *n_generated);

/* Why the session's last generating call (photon_session_generate, photon_session_generate_batch
 * or photon_session_next_token) stopped. PHOTON_STOP_NONE before the first one, in a restored
 * session, and after a photon_session_next_token that returned a token. */
PHOTON_API photon_stop_reason photon_session_stop_reason(const photon_session *session);

/* Asks the session to stop generating or prefilling. Safe to call from any thread at any time;
 * NULL is accepted. The request is pending until a call answers it, by stopping, or discards it:
 *   - photon_session_generate, photon_session_generate_batch, photon_session_prefill,
 *     photon_session_prefill_logprobs and photon_session_prefill_batch discard a pending request
 *     when they start (for each of their sessions): only a request made while they run stops them;
 *   - photon_session_next_token does not: a request made before or during a pull loop stops the
 *     loop at its next pull.
 * The call that a request stops answers it: a generating call stops before its next token (stop
 * reason PHOTON_STOP_CANCELLED; a pull returns -1 then, and generates nothing), a prefill between
 * two slices (PHOTON_ERR_CANCELLED). That clears the request, so the next call goes on as if none
 * had been made: pulling again resumes a pull loop that a cancellation stopped. */
PHOTON_API void photon_session_cancel(photon_session *session);

/* Number of tokens the session holds (prompt and generated). */
PHOTON_API int32_t photon_session_position(const photon_session *session);

/* Copies the session's token history. As photon_model_tokenize for capacity and
 * PHOTON_ERR_BUFFER_TOO_SMALL. */
PHOTON_API photon_status photon_session_tokens(const photon_session *session, int32_t *tokens,
                                               size_t capacity, size_t *n_tokens);

/* KV-cache bytes in use at one level, in the session's kv type: encoder_bytes for the
 * level's encoder cache (the one that grows with the context), window_bytes for its open local
 * decoder windows (bounded by R + C - 1 positions each). PHOTON levels are 1..L; vanilla has one
 * level (1), reported as encoder_bytes. Either pointer may be NULL. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT for a level outside the model. */
PHOTON_API photon_status photon_session_kv_bytes(const photon_session *session, int32_t level,
                                                 uint64_t *encoder_bytes, uint64_t *window_bytes);

/* Creates options holding the session's current settings (mode, context length, kv type, sampler
 * and context shift), so a caller can change some of them and apply the result with
 * photon_session_set_sampler. */
PHOTON_API photon_status photon_session_get_options(const photon_session *session,
                                                    photon_session_options **out);

/* Replaces the session's sampler settings (temperature, top-k/p, min-p, penalties, logit bias,
 * alternatives, seed, ignore-EOS, stop strings) and its context shift with those of options;
 * mode, context length and kv type are not changed. Used to override the settings of a restored
 * session. */
PHOTON_API photon_status photon_session_set_sampler(photon_session *session,
                                                    const photon_session_options *options);

/* ---------------------------------------------------------------------------------------------- */
/* Pull-style iteration                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/* Produces the next token without a callback, for callers that cannot be called back (managed
 * runtimes): on PHOTON_OK, *token holds the next token id, or -1 when a stop rule (before
 * photon_session_generate) stopped generation; photon_session_stop_reason says which. A pull has
 * no budget, and never discards a cancellation (photon_session_cancel). A stop string ends a pull
 * loop one pull later than the other reasons: the pull that returns the token completing it sets
 * the stop reason PHOTON_STOP_STRING, and the next pull returns -1 (unless a generate or prefill
 * call came between); the pull after that goes on. piece receives the token's UTF-8-complete
 * text (see photon_token_callback) as photon_model_detokenize does for capacity and
 * PHOTON_ERR_BUFFER_TOO_SMALL (*piece_len is set either way; on
 * PHOTON_ERR_BUFFER_TOO_SMALL the token is kept and the next call returns it again); piece may be
 * NULL with capacity 0 to skip the text. logprob may be NULL. Tokens delivered by this call are
 * part of the history, exactly as with photon_session_generate, and the two produce the same
 * tokens. */
PHOTON_API photon_status photon_session_next_token(photon_session *session, int32_t *token,
                                                   char *piece, size_t piece_capacity,
                                                   size_t *piece_len, float *logprob);

/* ---------------------------------------------------------------------------------------------- */
/* Batched prefill and decoding                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* Receives the tokens of photon_session_generate_batch; session_index is the session's index in the
 * array. Return non-zero to stop that session (the others go on). */
typedef int (*photon_batch_callback)(void *user_data, size_t session_index, int32_t token,
                                     const char *piece, size_t piece_len, float logprob);

/* Consumes tokens[i] (n_tokens[i] of them; tokens[i] may be NULL when that is 0) into sessions[i],
 * as photon_session_prefill would for each, with the prompts of all sessions sharing each GEMM
 * (passes of up to 512 tokens on the CPU, 4096 on a GPU; up to 512 of them from one session).
 * Each session ends in the
 * state photon_session_prefill would give it, and then generates the same tokens. Every session's
 * tokens are checked before any is consumed: PHOTON_ERR_BAD_TOKEN or PHOTON_ERR_CONTEXT_FULL
 * ("session i" in the message) leave all sessions unchanged. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT if the sessions do not share one model or a session appears twice.
 * photon_session_cancel on any of the sessions stops the batch between passes
 * (PHOTON_ERR_CANCELLED); each session then holds what photon_session_prefill keeps after a
 * cancellation. */
PHOTON_API photon_status photon_session_prefill_batch(photon_session *const *sessions,
                                                      size_t n_sessions,
                                                      const int32_t *const *tokens,
                                                      const size_t *n_tokens);

/* Advances n_sessions sessions of one model together, each by up to max_tokens tokens, with the
 * GEMMs of all sessions batched into one call per weight matrix. Sessions may differ in prompt
 * length, mode, sampler and stop rules; each stops on its own rules (those of
 * photon_session_generate: the callback's non-zero and photon_session_cancel stop that session)
 * and drops out while the others go on. Each session produces exactly the tokens
 * photon_session_generate would have produced for it. n_generated (may be NULL) receives
 * n_sessions counts. Fails with PHOTON_ERR_INVALID_ARGUMENT if the sessions do not share one
 * model, a session appears twice, or one holds no tokens. */
PHOTON_API photon_status photon_session_generate_batch(photon_session *const *sessions,
                                                       size_t n_sessions, int32_t max_tokens,
                                                       photon_batch_callback callback,
                                                       void *user_data, int32_t *n_generated);

/* ---------------------------------------------------------------------------------------------- */
/* Saving and restoring sessions                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* Serializes the session's complete state (schemas/session.fbs): a fingerprint of the model and
 * tokenizer, mode, context length, KV type, token history, sampler settings (temperature, top-k,
 * top-p, min-p, repetition penalty and its window, seed, ignore-EOS, stop strings), the generated
 * text that stop strings are matched in and the bytes of a character not yet delivered, and the
 * caches and mode state needed to continue (RecGen: the top-level cache, the plans and the open
 * windows; HierGen: every level's encoder cache, pending units and open window; vanilla: its
 * cache). A restored session continues exactly as this one would have, in any process: the same
 * tokens, pieces and log-probabilities, stopping at the same tokens for the same reasons, and the
 * same after a later prefill. It does not keep: the stop reason (PHOTON_STOP_NONE until its first
 * call; a pull loop's next pull, which would return -1 after a stop string, returns the next
 * token), a pending photon_session_cancel (its first pull is not stopped), and context shift
 * (off until photon_session_set_sampler turns it on). States are portable between devices:
 * caches are saved in the session's KV type (f32 unless photon_session_options_set_kv_type chose
 * another) whatever the device, so a state saved on a GPU restores on the CPU and the other way
 * round; it then continues with the other device's arithmetic (log-probabilities within the
 * bounds given at photon_load_options_set_device). If capacity is too small (buffer may be NULL),
 * returns PHOTON_ERR_BUFFER_TOO_SMALL with *size set to the bytes needed; otherwise *size receives
 * the bytes written. */
PHOTON_API photon_status photon_session_save(photon_session *session, void *buffer, size_t capacity,
                                             size_t *size);
/* As photon_session_save, to a file (written to a temporary name and renamed). */
PHOTON_API photon_status photon_session_save_file(photon_session *session, const char *path);

/* Creates a new session from a saved state for `model`; states saved by earlier releases (older
 * format versions) restore too. Refuses, with nothing created: a state of another model or
 * tokenizer (PHOTON_ERR_WRONG_MODEL), a newer format (PHOTON_ERR_UNSUPPORTED_VERSION), a blob that
 * is not a session state (PHOTON_ERR_BAD_IDENTIFIER), a truncated one (PHOTON_ERR_TRUNCATED) or any
 * other damage (PHOTON_ERR_CORRUPT), among them a NaN or an infinity in a KV cache or a saved
 * activation, each with a message saying what. */
PHOTON_API photon_status photon_session_restore(const photon_model *model, const void *data,
                                                size_t size, photon_session **out);
/* As photon_session_restore, from a file. */
PHOTON_API photon_status photon_session_restore_file(const photon_model *model, const char *path,
                                                     photon_session **out);

/* ---------------------------------------------------------------------------------------------- */
/* Serving many requests: the engine                                                              */
/* ---------------------------------------------------------------------------------------------- */

/* A photon_engine serves generation requests over one model with continuous batching: between
 * decode steps it admits waiting requests, prefills their prompts together, and lets finished and
 * cancelled requests leave, so that every running request advances at every step with one GEMM
 * per weight matrix for all of them.
 *
 * Results. Every request produces exactly the tokens and log-probabilities that a session created
 * with its options, given its prompt and generating with photon_session_generate(max_tokens)
 * would produce (greedy or seeded sampling alike), whatever other requests run beside it, however
 * its prompt was split into chunks, and whether it was paused and resumed.
 *
 * A step (photon_engine_step, or one turn of the engine's worker thread):
 *   1. Requests cancelled since the last step end (PHOTON_STOP_CANCELLED), and their memory is
 *      freed.
 *   2. Admission, in order: paused requests first (oldest first), then waiting requests in
 *      submission order (FIFO), each while fewer than max_running requests run and its memory fits
 *      the budget; the first that does not fit stops admission (no request overtakes an older one).
 *   3. Prompts: up to step_tokens prompt tokens of the running requests that still have prompt
 *      left, oldest request first, consumed together (as photon_session_prefill_batch); a longer
 *      prompt continues at the next steps, while the requests that finished theirs keep decoding.
 *      A RecGen request's prompt is read in one step, begun while the step has any of its
 *      step_tokens left: RecGen keeps no encoder cache below its top level and encodes the whole
 *      prompt at each prefill, so in pieces a prompt would cost the square of its length.
 *   4. Decoding: every running request whose prompt is consumed advances by one decode step of its
 *      mode (a RecGen request may deliver several tokens, one per open level-1 window), all in one
 *      batch; tokens are delivered through each request's callback or queued for
 *      photon_request_next_token, and each request stops on its own rules (those of
 *      photon_session_generate, with its max_tokens).
 *
 * Memory. The sessions the engine creates (from a prompt or a saved state) hold KV caches sized
 * to the positions they have used, grown in steps (at least doubling) as they go, never beyond
 * their context length; a session the application lends keeps its whole context, as created.
 * With a memory budget, the running requests' sessions stay within it, as photon_model_memory
 * counts them between steps: before a step, the cache growth the step needs is counted, and while
 * it does not fit, the newest running request is paused (its session saved to host memory as
 * photon_session_save would, outside the budget, and its caches freed). Paused requests resume,
 * oldest first, when their memory fits again, exactly where they stopped. A request that alone
 * exceeds the budget fails with PHOTON_ERR_OUT_OF_MEMORY. A finished request's session leaves the
 * budget but stays (for photon_request_save and _take_session) until the request is freed.
 *
 * Errors. A request whose step fails (an allocation, its session, a device error) ends with
 * PHOTON_STOP_ERROR and a status and message (photon_request_status, photon_request_error); the
 * engine and the other requests go on.
 *
 * Threads. An engine runs its steps on one thread at a time: its own worker (photon_engine_start
 * ... photon_engine_stop), or a thread of the application that calls photon_engine_step in a loop
 * (for applications with an event loop of their own). Any thread may submit, cancel, query, wait
 * on, pull from and free requests at any time, and read the engine's statistics. Token callbacks
 * run on the thread that runs the steps; a callback may call any request function and
 * photon_engine_submit, but not photon_engine_step, _stop, _free, or photon_request_wait /
 * photon_request_next_token with a timeout other than 0 on a request of the same engine (they would
 * wait for the step the callback is part of). The model must outlive the engine. On a GPU the
 * engine's steps share the device with the model's other users, as sessions do. */
typedef struct photon_engine photon_engine;
typedef struct photon_engine_options photon_engine_options;
typedef struct photon_request photon_request;
typedef struct photon_request_options photon_request_options;

/* Creates engine options with the defaults: max_running 64, max_waiting 1024, no memory budget,
 * step_tokens 512. */
PHOTON_API photon_status photon_engine_options_create(photon_engine_options **out);
/* Frees engine options; NULL is accepted. */
PHOTON_API void photon_engine_options_free(photon_engine_options *options);
/* The most requests that run (prefill or decode) at once, >= 1. */
PHOTON_API photon_status photon_engine_options_set_max_running(photon_engine_options *options,
                                                               int32_t max_running);
/* The most requests that wait for admission, >= 0; photon_engine_submit beyond it fails at once
 * with PHOTON_ERR_BUSY. Paused requests do not count. */
PHOTON_API photon_status photon_engine_options_set_max_waiting(photon_engine_options *options,
                                                               int32_t max_waiting);
/* The most bytes the running requests' sessions may hold (their caches and states, as
 * photon_model_memory counts them; a step's own workspaces come and go within the step and are
 * not counted); 0 (the default) for no limit. */
PHOTON_API photon_status photon_engine_options_set_memory_budget(photon_engine_options *options,
                                                                 uint64_t bytes);
/* The most prompt tokens a step consumes, >= 1 (chunked prefill): smaller keeps the running
 * streams' time between tokens shorter while a long prompt is read, larger reads it sooner.
 * RecGen prompts are read whole (step 3 above). */
PHOTON_API photon_status photon_engine_options_set_step_tokens(photon_engine_options *options,
                                                               int32_t step_tokens);
/* The prefix cache: up to `bytes` of saved sessions (host memory, outside the memory budget) of
 * prompts the engine has read; 0 (the default) for none. When a request that starts afresh from a
 * prompt has read it, before it generates, its session is saved there (as photon_session_save
 * would), replacing the least recently used saves beyond `bytes`. A later request that starts
 * afresh, with the same mode, context length and kv type, and whose prompt begins with a saved
 * prompt (the longest such; in RecGen, whose prompt is a saved prompt: RecGen keeps no encoder
 * caches below its top level, so it encodes a longer prompt whole again, and its saves are
 * small), is restored from that save instead of reading those tokens again: they count as reused
 * (PHOTON_REQUEST_REUSED_TOKENS), and its results stay those of reading its whole prompt (Results
 * above), whatever its sampler settings. Admission (step 2) stops at a waiting request whose
 * prompt would be restored from the save of a prompt a running request is still reading, until
 * that one is read and saved: choices of one prompt submitted together read it once. A save holds
 * the KV caches its mode keeps (photon_session_kv_bytes: RecGen keeps the least), and saving costs
 * a copy of them. Requests that continue a state or a session are neither looked up nor saved. */
PHOTON_API photon_status photon_engine_options_set_prefix_cache(photon_engine_options *options,
                                                                uint64_t bytes);

/* Creates an engine over a model (options may be NULL for the defaults). It runs no thread until
 * photon_engine_start. */
PHOTON_API photon_status photon_engine_create(const photon_model *model,
                                              const photon_engine_options *options,
                                              photon_engine **out);
/* Stops the worker if one runs, ends every unfinished request with PHOTON_STOP_CANCELLED and frees
 * the engine; NULL is accepted. Request handles stay valid (finished) until photon_request_free. */
PHOTON_API void photon_engine_free(photon_engine *engine);

/* Starts the engine's worker thread, which runs steps while there is work and sleeps otherwise.
 * Fails with PHOTON_ERR_INVALID_ARGUMENT when it runs already, and with PHOTON_ERR_INTERNAL when
 * the system refuses a thread. */
PHOTON_API photon_status photon_engine_start(photon_engine *engine);

typedef enum photon_engine_stop_mode {
  PHOTON_ENGINE_DRAIN = 0, /* finish every request submitted so far, then stop */
  PHOTON_ENGINE_CANCEL = 1 /* end every unfinished request with PHOTON_STOP_CANCELLED, then stop */
} photon_engine_stop_mode;

/* Stops the worker thread started by photon_engine_start and returns when it has ended. With
 * PHOTON_ENGINE_DRAIN, requests submitted while it drains are served too. The engine can be
 * started again, or stepped. Fails with PHOTON_ERR_INVALID_ARGUMENT when no worker runs. */
PHOTON_API photon_status photon_engine_stop(photon_engine *engine, photon_engine_stop_mode mode);

/* Runs one step (above) on the calling thread; *n_unfinished (may be NULL) receives the number of
 * requests not yet finished (waiting, running or paused). A step with nothing to do returns at
 * once. Fails with PHOTON_ERR_INVALID_ARGUMENT while the worker runs or another thread is in a
 * step. A failure inside the step ends only the requests it concerns (see Errors above). */
PHOTON_API photon_status photon_engine_step(photon_engine *engine, int32_t *n_unfinished);

typedef enum photon_engine_stat {
  PHOTON_ENGINE_WAITING = 0,            /* requests waiting for admission now */
  PHOTON_ENGINE_RUNNING = 1,            /* requests running now */
  PHOTON_ENGINE_PAUSED = 2,             /* requests paused now */
  PHOTON_ENGINE_SUBMITTED = 3,          /* requests accepted by photon_engine_submit, in all */
  PHOTON_ENGINE_REFUSED = 4,            /* submissions refused with PHOTON_ERR_BUSY, in all */
  PHOTON_ENGINE_FINISHED = 5,           /* requests ended (any reason), in all */
  PHOTON_ENGINE_FAILED = 6,             /* of those, ended by an error */
  PHOTON_ENGINE_CANCELLED = 7,          /* of those, cancelled */
  PHOTON_ENGINE_PROMPT_TOKENS = 8,      /* prompt tokens consumed, in all */
  PHOTON_ENGINE_REUSED_TOKENS = 9,      /* tokens continued from given sessions or states, in all */
  PHOTON_ENGINE_GENERATED_TOKENS = 10,  /* tokens delivered, in all */
  PHOTON_ENGINE_PAUSES = 11,            /* times a request was paused, in all */
  PHOTON_ENGINE_STEPS = 12,             /* steps that did work, in all */
  PHOTON_ENGINE_MEMORY_IN_USE = 13,     /* bytes the requests' sessions hold now (the budget's) */
  PHOTON_ENGINE_MEMORY_PEAK = 14,       /* the most of those at any time */
  PHOTON_ENGINE_TOKENS_PER_SECOND = 15, /* tokens delivered per second over the last 10 s */
  PHOTON_ENGINE_PREFIX_HITS = 16,       /* requests restored from the prefix cache, in all */
  PHOTON_ENGINE_PREFIX_BYTES = 17       /* bytes the prefix cache holds now */
} photon_engine_stat;

/* The engine's statistic `stat` (counts are exact below 2^53). Safe from any thread. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT for a NULL engine or value, or an unknown stat. */
PHOTON_API photon_status photon_engine_get_stat(const photon_engine *engine,
                                                photon_engine_stat stat, double *value);

/* What a request asks for; options may be freed (or changed and reused) right after submit. */
PHOTON_API photon_status photon_request_options_create(photon_request_options **out);
/* Frees request options; NULL is accepted. */
PHOTON_API void photon_request_options_free(photon_request_options *options);
/* The session settings of the request (mode, context length, kv type, sampler, stop strings;
 * copied). Default: photon_session_options_create's. A request that continues a state or a
 * session keeps its mode, context length and kv type, and takes these sampler settings only if
 * they were set (as photon_session_set_sampler). */
PHOTON_API photon_status photon_request_options_set_session_options(
    photon_request_options *options, const photon_session_options *session_options);
/* The prompt as token ids (copied), consumed after whatever the request continues. */
PHOTON_API photon_status photon_request_options_set_prompt(photon_request_options *options,
                                                           const int32_t *tokens, size_t n_tokens);
/* The prompt as UTF-8 text (copied), tokenized at submit as photon_model_tokenize does (add_bos
 * non-zero puts BOS first). Replaces a prompt given as tokens, and the other way round. */
PHOTON_API photon_status photon_request_options_set_prompt_text(photon_request_options *options,
                                                                const char *text, size_t text_len,
                                                                int add_bos);
/* Continue a saved session state (photon_session_save's bytes, copied; checked at submit as
 * photon_session_restore checks it). The prompt, if any, follows the state's history. */
PHOTON_API photon_status photon_request_options_set_state(photon_request_options *options,
                                                          const void *data, size_t size);
/* Continue a live session of the engine's model: at a successful submit the request takes it over
 * (do not use or free it; photon_request_take_session gives it back once the request has
 * finished, and photon_request_free frees it if it was not taken). The options keep no reference
 * to it after the submit. NULL removes it. */
PHOTON_API photon_status photon_request_options_set_session(photon_request_options *options,
                                                            photon_session *session);
/* The most tokens to generate, >= 0; -1 (the default) for no limit but the context length. */
PHOTON_API photon_status photon_request_options_set_max_tokens(photon_request_options *options,
                                                               int32_t max_tokens);
/* Delivers the request's tokens through callback (on the engine's stepping thread; non-zero stops
 * this request alone, PHOTON_STOP_CALLBACK); NULL (the default) queues them for
 * photon_request_next_token instead. */
PHOTON_API photon_status photon_request_options_set_callback(photon_request_options *options,
                                                             photon_token_callback callback,
                                                             void *user_data);
/* Told once that a request has finished: why it stopped, and PHOTON_OK or the error that ended it
 * (photon_request_error has the message). */
typedef void (*photon_request_finish_callback)(void *user_data, photon_stop_reason reason,
                                               photon_status status);
/* Calls callback once when the request finishes, after its last token callback: on the engine's
 * stepping thread, or, for a request that photon_engine_free cancels, on the thread freeing the
 * engine; it may come before photon_engine_submit has returned the handle to another thread. The
 * request is PHOTON_REQUEST_FINISHED by then, and callback may read it (photon_request_get_*,
 * photon_request_status, photon_request_error) and free it, but must not wait for it
 * (photon_request_wait, photon_request_next_token) or call photon_engine_* functions.
 * photon_request_wait, and the end of the tokens of photon_request_next_token, come after callback
 * has returned. No call comes once photon_request_free has returned. NULL (the default) calls
 * nothing. */
PHOTON_API photon_status photon_request_options_set_finish_callback(
    photon_request_options *options, photon_request_finish_callback callback, void *user_data);

/* Submits a request; on success *out is its handle (free it with photon_request_free), returned at
 * once: the request waits for a step to admit it. It needs a prompt, a state or a session, and
 * must end up holding at least one token. Fails with PHOTON_ERR_BUSY when max_waiting requests
 * wait already (nothing is taken over), with the errors of photon_session_create,
 * photon_session_restore (a state) and photon_session_prefill's checks (PHOTON_ERR_BAD_TOKEN,
 * PHOTON_ERR_CONTEXT_FULL) on the request's own input, and with PHOTON_ERR_INVALID_ARGUMENT for a
 * session of another model or one in use. Safe from any thread. */
PHOTON_API photon_status photon_engine_submit(photon_engine *engine,
                                              const photon_request_options *options,
                                              photon_request **out);

/* Asks the request to end: it ends at the engine's next step with PHOTON_STOP_CANCELLED (already
 * delivered tokens stay delivered), and its memory is freed then. A finished request is not
 * changed. Safe from any thread; NULL is accepted. */
PHOTON_API void photon_request_cancel(photon_request *request);

/* Frees the handle; NULL is accepted. An unfinished request is cancelled first; its callback is not
 * called after this returns (called from the request's own callback, it takes effect when the
 * callback returns). */
PHOTON_API void photon_request_free(photon_request *request);

typedef enum photon_request_state {
  PHOTON_REQUEST_WAITING = 0, /* submitted, not admitted yet */
  PHOTON_REQUEST_RUNNING = 1, /* consuming its prompt or generating */
  PHOTON_REQUEST_PAUSED = 2,  /* saved to host memory until the memory budget has room */
  PHOTON_REQUEST_FINISHED = 3 /* ended: photon_request_stop_reason says why */
} photon_request_state;

/* The request's state now; PHOTON_REQUEST_FINISHED for NULL. Safe from any thread. */
PHOTON_API photon_request_state photon_request_get_state(const photon_request *request);
/* Why the request ended (PHOTON_STOP_LENGTH for max_tokens, _EOS, _STRING, _CALLBACK, _CANCELLED,
 * _CONTEXT_FULL or _ERROR); PHOTON_STOP_NONE while it has not. */
PHOTON_API photon_stop_reason photon_request_stop_reason(const photon_request *request);
/* PHOTON_OK, or the status of the error that ended the request (PHOTON_STOP_ERROR). */
PHOTON_API photon_status photon_request_status(const photon_request *request);
/* The message of that error ("" if none); owned by the request. */
PHOTON_API const char *photon_request_error(const photon_request *request);

/* Waits until the request has finished, at most timeout_ms milliseconds (-1: no limit; 0: only
 * look). Fails with PHOTON_ERR_TIMEOUT when it has not finished by then. */
PHOTON_API photon_status photon_request_wait(photon_request *request, int32_t timeout_ms);

/* The next queued token of a request without a callback, waiting at most timeout_ms milliseconds
 * (-1: no limit; 0: only look) for it: on PHOTON_OK *token is its id, or -1 once the request has
 * finished and every token was taken. piece, piece_capacity, *piece_len and logprob as
 * photon_session_next_token (on PHOTON_ERR_BUFFER_TOO_SMALL the token stays queued). Fails with
 * PHOTON_ERR_TIMEOUT when no token came in time, and PHOTON_ERR_INVALID_ARGUMENT for a request with
 * a callback. One thread at a time per request. */
PHOTON_API photon_status photon_request_next_token(photon_request *request, int32_t timeout_ms,
                                                   int32_t *token, char *piece,
                                                   size_t piece_capacity, size_t *piece_len,
                                                   float *logprob);

typedef enum photon_request_stat {
  PHOTON_REQUEST_PROMPT_TOKENS = 0,       /* prompt tokens consumed */
  PHOTON_REQUEST_REUSED_TOKENS = 1,       /* tokens of the continued state or session */
  PHOTON_REQUEST_GENERATED_TOKENS = 2,    /* tokens delivered */
  PHOTON_REQUEST_QUEUE_SECONDS = 3,       /* from submit to admission */
  PHOTON_REQUEST_FIRST_TOKEN_SECONDS = 4, /* from submit to the first delivered token */
  PHOTON_REQUEST_DECODE_SECONDS = 5,      /* from the first delivered token to the end (or now) */
  PHOTON_REQUEST_PAUSED_SECONDS = 6,      /* time spent paused */
  PHOTON_REQUEST_PAUSES = 7               /* times paused */
} photon_request_stat;

/* The request's statistic `stat`; times not reached yet are NaN. Safe from any thread. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT for a NULL request or value, or an unknown stat. */
PHOTON_API photon_status photon_request_get_stat(const photon_request *request,
                                                 photon_request_stat stat, double *value);

/* The finished request's session state (photon_session_save's bytes): its history, caches and
 * sampler, to continue it later (photon_request_options_set_state, photon_session_restore). As
 * photon_session_save for buffer, capacity, *size and PHOTON_ERR_BUFFER_TOO_SMALL. Fails with
 * PHOTON_ERR_INVALID_ARGUMENT before the request has finished, or once its session was taken or
 * ended by an error. */
PHOTON_API photon_status photon_request_save(photon_request *request, void *buffer, size_t capacity,
                                             size_t *size);

/* Hands the finished request's session to the caller (*out; free it with photon_session_free):
 * the session given with photon_request_options_set_session, or the one the request created. It
 * holds the request's history as a session that ran photon_session_generate would. Fails as
 * photon_request_save does. */
PHOTON_API photon_status photon_request_take_session(photon_request *request, photon_session **out);

#ifdef __cplusplus
}
#endif

#endif /* PHOTON_H */
