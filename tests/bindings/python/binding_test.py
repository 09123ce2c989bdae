#!/usr/bin/env python3
"""Tests of the Python binding, run by ctest with the package on PYTHONPATH.

    binding_test.py test MODEL WORKDIR SHIPPED  streaming, cancel, errors, save / restore; inputs
                                              longer than the context on SHIPPED (the shipped
                                              model: a context of 256 tokens, its tokenizer
                                              beside it)
    binding_test.py memory MODEL              create and free models and sessions in a loop
    binding_test.py save MODEL STATE OUT      cross-language: save a state, write the continuation
    binding_test.py engine MODEL              the serving engine: streams, cancel, errors, stats
    binding_test.py engine-memory MODEL       submit and free engine requests in a loop
    binding_test.py restore MODEL STATE OUT   cross-language: restore it, write the continuation

Every language binding implements the same modes with the same prompt, sampler and budgets, so
that the continuations written by save and restore can be compared across languages.
"""
import ast
import asyncio
import gc
import inspect
import math
import os
import pathlib
import subprocess
import sys
import threading
import time

import photon

PROMPT = "In the beginning God created the heaven and the earth."
# Prompts of different lengths for the batched prefill.
BATCH_PROMPTS = (PROMPT, "And the earth was without form.", "Let there be light.")
WARMUP, LOOPS, LATE_LOOPS = 20, 200, 100
# RSS growth allowed over the loops, far below a leak's: a model kept alive holds ~30 MB.
CLOSED_BOUND_MB, LATE_BOUND_MB = 64, 128


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def sampling():
    return photon.SessionOptions().set_temperature(0.8).set_seed(42)


def prompted(model, options=None):
    session = photon.Session(model, options or sampling())
    session.prefill(PROMPT)
    return session


def expect_error(call, status_names, what):
    """Runs call, which must raise PhotonError with one of status_names (a name or a tuple)."""
    try:
        call()
    except photon.PhotonError as error:
        check(error.status_name in status_names,
              f"{what}: expected {status_names}, got {error.status_name}: {error}")
        check(isinstance(error, RuntimeError) and error.status > 0, f"{what}: {error!r}")
        return error
    raise AssertionError(f"{what}: no PhotonError raised")


def test_model(model):
    check(model.arch in ("photon", "vanilla") and model.vocab_size > 0, "model properties")
    check(model.config["vocab_size"] == model.vocab_size, "config")
    ids = model.tokenize(PROMPT)
    check(ids[0] == model.bos and model.detokenize(ids) == PROMPT, f"tokenize round trip: {ids}")
    check(photon.version().count(".") == 2 and photon.__version__ == photon.version(), "version")


def test_streaming(model):
    with prompted(model) as pushed, prompted(model) as pulled:
        received = []
        check(pushed.generate(12, received.append) == 12, "generate's count")
        check(pushed.stop_reason == photon.StopReason.LENGTH, f"stop: {pushed.stop_reason!r}")
        streamed = list(pulled.tokens(12))
        check([t.id for t in received] == [t.id for t in streamed],
              "callback and iterator produce the same tokens")
        check(pushed.history() == pulled.history(), "same history")
        text = "".join(t.piece for t in received)
        check(model.detokenize(pushed.history()) == PROMPT + text, f"pieces: {text!r}")
        check(all(t.logprob <= 0 for t in received), "log probabilities")
        check(len(list(pulled.tokens(0))) == 0, "an empty budget yields nothing")


def test_cancel(model):
    with prompted(model) as session:
        start = session.position
        seen = []
        count = session.generate(10, lambda token: seen.append(token) or len(seen) < 3)
        check(count == 3 and session.stop_reason == photon.StopReason.CALLBACK,
              f"returning False stops: {count}, {session.stop_reason!r}")
        check(session.position == start + 3, "the stopping token is kept")
        count = session.generate(10, lambda token: session.cancel())
        check(session.stop_reason == photon.StopReason.CANCELLED and 1 <= count < 10,
              f"cancel() from the callback: {count}, {session.stop_reason!r}")


def test_cancel_iterator(model):
    """cancel() from another thread ends a pull loop (tokens()) at its next pull, with
    StopReason.CANCELLED. The loop waits at its third token until the other thread has cancelled,
    so that the request lands inside the loop however the threads are scheduled; every wait is
    bounded. A cancel() made before a loop ends it at its first pull, and pulling again resumes."""
    endless = photon.SessionOptions().set_ignore_eos(True)
    with photon.Session(model, endless) as session, photon.Session(model, endless) as alone:
        session.prefill(PROMPT)
        alone.prefill(PROMPT)
        expected = [token.id for token in alone.tokens(8)]
        third, cancelled = threading.Event(), threading.Event()

        def cancel_at_third():
            if third.wait(60):
                session.cancel()
            cancelled.set()

        canceller = threading.Thread(target=cancel_at_third)
        canceller.start()
        pulled = []
        for token in session.tokens(200):  # a budget the cancellation must cut short
            pulled.append(token.id)
            if len(pulled) == 3:
                third.set()
                check(cancelled.wait(60), "the other thread cancelled within a minute")
        third.set()
        canceller.join()
        check(pulled == expected[:3] and session.stop_reason == photon.StopReason.CANCELLED,
              f"cancel() from another thread ends the loop: {len(pulled)} tokens, "
              f"{session.stop_reason!r}")
        session.cancel()
        check(list(session.tokens(5)) == [] and
              session.stop_reason == photon.StopReason.CANCELLED,
              "a cancel() before a loop ends it at its first pull")
        check([token.id for token in session.tokens(5)] == expected[3:8], "pulling again resumes")


class CallbackFailure(Exception):
    pass


def test_callback_exception(model):
    with prompted(model) as session:
        start = session.position
        seen = []

        def fail_on_second(token):
            seen.append(token)
            if len(seen) == 2:
                raise CallbackFailure("stop here")

        try:
            session.generate(10, fail_on_second)
            raise AssertionError("the callback's exception was swallowed")
        except CallbackFailure as error:
            check(str(error) == "stop here", "the very exception reaches the caller")
        check(session.position == start + 2 and session.stop_reason == photon.StopReason.CALLBACK,
              f"generation stopped at the exception: {session.position - start}")
        check(session.generate(2) == 2, "the session stays usable")


def test_batch(model):
    with prompted(model) as solo:
        expected = [t.id for t in solo.tokens(6)]
    with prompted(model) as first, prompted(model) as second:
        received = ([], [])
        counts = photon.Session.generate_batch(
            [first, second], 6, lambda index, token: received[index].append(token.id))
        check(counts == [6, 6] and received == (expected, expected),
              f"a batch gives each session its own tokens: {counts}, {received}")
        counts = photon.Session.generate_batch([first, second], 4, lambda index, token: index == 1)
        check(counts == [1, 4] and first.stop_reason == photon.StopReason.CALLBACK,
              f"False stops one session of the batch: {counts}")
        check(photon.Session.generate_batch([first, second], 2) == [2, 2], "without a callback")
    test_prefill_batch(model)


def test_prefill_batch(model):
    """prefill_batch leaves each session as prefill alone would: same position, same tokens."""
    prompts = [model.tokenize(text) for text in BATCH_PROMPTS]
    expected = []
    for ids in prompts:
        with photon.Session(model) as solo:
            solo.prefill(ids)
            expected.append((solo.position, [t.id for t in solo.tokens(6)]))
    sessions = [photon.Session(model) for _ in prompts]
    try:
        photon.Session.prefill_batch(sessions, prompts)
        positions = [session.position for session in sessions]
        check(positions == [position for position, _ in expected],
              f"prefill_batch positions: {positions} vs {expected}")
        tokens = [[t.id for t in session.tokens(6)] for session in sessions]
        check(tokens == [ids for _, ids in expected],
              f"prefill_batch gives each session its own tokens: {tokens} vs {expected}")
        positions = [session.position for session in sessions]
        bad = [[1], [model.bos, model.vocab_size], [2]]
        error = expect_error(lambda: photon.Session.prefill_batch(sessions, bad),
                             "PHOTON_ERR_BAD_TOKEN", "a token outside the vocabulary")
        check("session 1" in str(error), f"the message names the session: {error}")
        check([session.position for session in sessions] == positions,
              "a bad token leaves every session unchanged")
        expect_error(lambda: photon.Session.prefill_batch(sessions, prompts[:2]),
                     "PHOTON_ERR_INVALID_ARGUMENT", "fewer token lists than sessions")
    finally:
        for session in sessions:
            session.close()


def test_kv_type(model):
    """16-bit KV caches: chosen by name, reported by the session, kept by a restored one."""
    with photon.Session(model) as default:
        check(default.kv_type == "f32", f"the default kv type: {default.kv_type!r}")
    options = sampling().set_ignore_eos(True).set_kv_type("bf16")
    check(isinstance(options, photon.SessionOptions), "set_kv_type chains")
    with photon.Session(model, options) as session:
        check(session.kv_type == "bf16", f"a bf16 session's kv type: {session.kv_type!r}")
        session.prefill(PROMPT)
        tokens = list(session.tokens(4))
        check(len(tokens) == 4 and all(t.logprob <= 0 for t in tokens),
              f"a bf16 session generates: {tokens}")
        with photon.Session.restore(model, session.save()) as restored:
            check(restored.kv_type == "bf16", f"a restored session's type: {restored.kv_type!r}")
    with photon.Session(model, photon.SessionOptions().set_kv_type("f16")) as session:
        check(session.kv_type == "f16", f"an f16 session's kv type: {session.kv_type!r}")
    error = expect_error(lambda: photon.SessionOptions().set_kv_type("f8"),
                         "PHOTON_ERR_INVALID_ARGUMENT", "kv type 'f8'")
    check("f8" in str(error) and "bf16" in str(error), f"the bad kv type named: {error}")


SAMPLER_TOKENS = 8


def greedy_tokens(model, options):
    with photon.Session(model, options) as session:
        session.prefill(PROMPT)
        return [t.id for t in session.tokens(SAMPLER_TOKENS)]


def test_sampler_settings(model):
    """Logit biases and presence / frequency penalties reach the sampler, each value with its
    token and its penalty. Greedy decoding shows it: a bias of -100 bars the unbiased first token
    and one of +100 forces its token; a frequency penalty of -100 (a gain of 100 per occurrence)
    repeats the prompt's most frequent token; presence -100 with frequency +60 favours the ids that
    occur once in the window (a gain of 40) over the others (a loss of 20 or more)."""
    prompt = model.tokenize(PROMPT)
    plain = greedy_tokens(model, greedy())
    first, forced = plain[0], prompt[1]
    check(first not in prompt and forced != first,
          f"the unbiased greedy run starts outside the prompt: {plain}")
    barred = greedy_tokens(model, greedy().set_logit_bias([first], [-100]))
    check(barred[0] != first, f"a bias of -100 bars token {first}: {barred}")
    paired = greedy_tokens(model, greedy().set_logit_bias([first, forced], (-100.0, 100.0)))
    check(paired == [forced] * SAMPLER_TOKENS, f"a bias of +100 forces token {forced}: {paired}")
    by_dict = greedy_tokens(model, greedy().set_logit_bias({first: -100, forced: 100}))
    check(by_dict == paired, f"a dict of biases: {by_dict}")
    options = greedy().set_logit_bias([forced], [100.0])
    check(options.set_logit_bias([], []) is options, "set_logit_bias chains")
    check(greedy_tokens(model, options) == plain, "empty lists clear the biases")

    common = max(prompt, key=prompt.count)
    check(prompt.count(common) > max(prompt.count(t) for t in prompt if t != common),
          f"the prompt has one most frequent token: {prompt}")
    options = greedy()
    check(options.set_frequency_penalty(-100) is options, "set_frequency_penalty chains")
    repeated = greedy_tokens(model, options)
    check(repeated == [common] * SAMPLER_TOKENS, f"frequency -100 repeats {common}: {repeated}")
    options = greedy()
    check(options.set_presence_penalty(-100).set_frequency_penalty(60) is options,
          "set_presence_penalty chains")
    mixed = greedy_tokens(model, options)
    window = prompt + mixed
    check(all(window[:len(prompt) + i].count(token) == 1 for i, token in enumerate(mixed)),
          f"presence -100 and frequency +60 favour the ids seen once: {mixed} after {prompt}")

    error = expect_error(lambda: photon.SessionOptions().set_logit_bias([first, forced], [1.0]),
                         "PHOTON_ERR_INVALID_ARGUMENT", "2 tokens with 1 bias")
    check("2 tokens" in str(error) and "1 biases" in str(error), f"the counts named: {error}")
    expect_error(lambda: photon.SessionOptions().set_logit_bias([first], [math.nan]),
                 "PHOTON_ERR_INVALID_ARGUMENT", "a NaN bias")
    expect_error(lambda: photon.SessionOptions().set_presence_penalty(math.inf),
                 "PHOTON_ERR_INVALID_ARGUMENT", "an infinite presence penalty")
    expect_error(lambda: photon.SessionOptions().set_frequency_penalty(math.nan),
                 "PHOTON_ERR_INVALID_ARGUMENT", "a NaN frequency penalty")
    outside = photon.SessionOptions().set_logit_bias({model.vocab_size: 1.0})
    expect_error(lambda: photon.Session(model, outside), "PHOTON_ERR_BAD_TOKEN",
                 "a biased token outside the vocabulary")
    for call, words in ((lambda: options.set_logit_bias([first], ["high"]), "biases[0]"),
                        (lambda: options.set_logit_bias([first], 1.0), "biases"),
                        (lambda: options.set_logit_bias([first]), "biases"),
                        (lambda: options.set_logit_bias(["a"], [1.0]), "tokens[0]")):
        try:
            call()
            raise AssertionError(f"no TypeError for {words}")
        except TypeError as error:
            check(str(error).startswith(f"photon: {words} "), f"{error}")


TOP_K = 3


def check_alternatives(tokens, k, what):
    """Each token holds k alternatives, (id, logprob) pairs of distinct ids, the most likely first
    (the lower id first on ties); greedy decoding drew the first one, whose log-probability is the
    token's own (to float rounding)."""
    check(len(tokens) == SAMPLER_TOKENS, f"{what}: {len(tokens)} tokens")
    for token in tokens:
        top = token.top_logprobs
        check(isinstance(top, tuple) and len(top) == k
              and all(isinstance(pair, tuple) and len(pair) == 2 for pair in top),
              f"{what}: {k} (id, logprob) pairs: {token}")
        if k == 0:
            continue
        check(top[0][0] == token.id and abs(top[0][1] - token.logprob) <= 1e-5,
              f"{what}: the greedy token is the first alternative: {token}")
        check(all(a[1] > b[1] or (a[1] == b[1] and a[0] < b[0]) for a, b in zip(top, top[1:])),
              f"{what}: the most likely first: {token}")
        check(len({pair[0] for pair in top}) == k and all(pair[1] <= 0 for pair in top),
              f"{what}: distinct ids, log-probabilities: {token}")


def with_alternatives(tokens):
    """Tokens with their alternatives, which a Token's own comparison leaves out."""
    return [(tuple(t), t.top_logprobs) for t in tokens]


def test_top_logprobs(model):
    """set_top_logprobs(k) gives each token its k alternatives, the same through the iterator,
    the callback and a batch; 0 gives none and the same draws; Model.token_piece names them."""
    options = greedy()
    check(options.set_top_logprobs(TOP_K) is options, "set_top_logprobs chains")
    with photon.Session(model, options) as session:
        session.prefill(PROMPT)
        pulled = list(session.tokens(SAMPLER_TOKENS))
    check_alternatives(pulled, TOP_K, "pulled")
    with prompted(model, options) as session:
        pushed = []
        session.generate(SAMPLER_TOKENS, pushed.append)
    check(with_alternatives(pushed) == with_alternatives(pulled),
          f"the callback's alternatives are the iterator's: {pushed}")
    token_id, piece, logprob = pulled[0]  # still a token's three fields
    check((token_id, piece, logprob) == (pulled[0].id, pulled[0].piece, pulled[0].logprob),
          "a Token unpacks into id, piece and logprob")
    with prompted(model, options) as first, prompted(model, options) as second:
        batched = ([], [])
        photon.Session.generate_batch([first, second], SAMPLER_TOKENS,
                                      lambda index, token: batched[index].append(token))
    check(with_alternatives(batched[0]) == with_alternatives(batched[1])
          == with_alternatives(pulled), f"a batch's alternatives: {batched}")

    with prompted(model, greedy()) as session:
        plain = list(session.tokens(SAMPLER_TOKENS))
    check_alternatives(plain, 0, "k = 0 pulled")
    with prompted(model, greedy().set_top_logprobs(0)) as session:
        quiet = []
        session.generate(SAMPLER_TOKENS, quiet.append)
    check_alternatives(quiet, 0, "k = 0 pushed")
    check([t.id for t in plain] == [t.id for t in quiet] == [t.id for t in pulled],
          "alternatives leave the draws alone")
    check(photon.Token(1, "a", -1.0).top_logprobs == (), "a Token without alternatives")
    for k in (21, -1):  # PHOTON_MAX_TOP_LOGPROBS is 20
        expect_error(lambda: photon.SessionOptions().set_top_logprobs(k),
                     "PHOTON_ERR_INVALID_ARGUMENT", f"set_top_logprobs({k})")

    # A token's raw bytes after the one before it are its piece when that piece is plain text: it
    # is not empty (the start of a split character) and nothing was held back before it.
    previous, held, compared = model.tokenize(PROMPT)[-1], False, 0
    for token in pulled:
        raw = model.token_piece(token.id, previous)
        check(isinstance(raw, bytes), f"token_piece gives bytes: {raw!r}")
        if token.piece and not held:
            check(raw == token.piece.encode(),
                  f"token {token.id}'s bytes after {previous}: {raw!r} vs {token.piece!r}")
            compared += 1
        for alternative, _ in token.top_logprobs:
            model.token_piece(alternative, previous)  # every alternative has a piece
        previous, held = token.id, not token.piece
    check(compared > 0, f"a plain text token's bytes are its piece: {pulled}")
    spaced = [t for t in pulled if t.piece.startswith(" ") and len(t.piece) > 1]
    for token in spaced:
        check(model.token_piece(token.id, -1) == token.piece[1:].encode()
              == model.token_piece(token.id, model.bos) == model.token_piece(token.id),
              f"at the start of the text a leading space is dropped: {token}")
    expect_error(lambda: model.token_piece(model.vocab_size, -1), "PHOTON_ERR_BAD_TOKEN",
                 "token_piece of an id outside the vocabulary")
    expect_error(lambda: model.token_piece(pulled[0].id, model.vocab_size),
                 "PHOTON_ERR_BAD_TOKEN", "token_piece after an id outside the vocabulary")


def test_errors(model, model_path, workdir):
    missing = os.path.join(workdir, "missing.photon")
    error = expect_error(lambda: photon.Model(missing), "PHOTON_ERR_IO", "missing file")
    check(missing in str(error), f"the message names the file: {error}")

    data = open(model_path, "rb").read()
    truncated = os.path.join(workdir, "truncated.photon")
    with open(truncated, "wb") as out:
        out.write(data[: len(data) // 2])
    error = expect_error(lambda: photon.Model(truncated), "PHOTON_ERR_TRUNCATED", "truncated")
    check(truncated in str(error), f"the message names the file: {error}")
    garbled = os.path.join(workdir, "garbled.photon")
    with open(garbled, "wb") as out:
        out.write(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    expect_error(lambda: photon.Model(garbled), "PHOTON_ERR_CORRUPT", "damaged header")

    expect_error(lambda: photon.Session.restore(model, b"not a session state " * 8),
                 ("PHOTON_ERR_BAD_IDENTIFIER", "PHOTON_ERR_TRUNCATED", "PHOTON_ERR_CORRUPT"),
                 "restore of garbage")
    with photon.Session(model) as session:
        expect_error(lambda: session.prefill([model.vocab_size]), "PHOTON_ERR_BAD_TOKEN",
                     "token outside the vocabulary")
    check(session.closed, "leaving the with block closes")
    expect_error(lambda: session.generate(1), "PHOTON_ERR_INVALID_ARGUMENT", "use after close")


def test_thread_count(model, model_path):
    with prompted(model) as session:
        expected = [t.id for t in session.tokens(8)]
    with photon.Model(model_path, threads=1) as single, prompted(single) as session:
        check([t.id for t in session.tokens(8)] == expected, "one thread gives the same tokens")
    expect_error(lambda: photon.Model(model_path, threads=-1), "PHOTON_ERR_INVALID_ARGUMENT",
                 "negative threads")


def test_score(model):
    """score() is teacher forcing: it gives each token the log-probability that HierGen
    generation (whose logits equal teacher forcing) reported for it."""
    with photon.Session(model, photon.SessionOptions().set_mode(photon.Mode.HIERGEN)) as session:
        session.prefill(PROMPT)
        start = session.position
        generated = []
        session.generate(6, generated.append)
        logprobs = model.score(session.history())
    check(len(logprobs) == start + 6 and logprobs[0] != logprobs[0], f"score's shape: {logprobs}")
    for token, scored in zip(generated, logprobs[start:]):
        check(abs(token.logprob - scored) < 1e-3, f"score {scored} vs generation {token.logprob}")
    expect_error(lambda: model.score([]), "PHOTON_ERR_INVALID_ARGUMENT", "nothing to score")


def test_score_top(model):
    """score_top() gives each token score()'s log-probability and its position's k alternatives,
    the most likely first; the token's own value among them is its log-probability exactly; the
    first token has none; k outside [1, vocab_size] is an error."""
    with photon.Session(model, greedy()) as session:  # greedy: the drawn tokens are alternatives
        session.prefill(PROMPT)
        session.generate(6)
        ids = session.history()
    plain = model.score(ids)
    scored = model.score_top(ids, TOP_K)
    check(isinstance(scored, list) and all(isinstance(s, photon.ScoredToken) for s in scored)
          and [s.id for s in scored] == ids, f"a ScoredToken per token: {scored}")
    first_id, first_logprob, first_top = scored[0]  # a tuple of its three fields
    check(first_id == ids[0] and math.isnan(first_logprob) and first_top == (),
          f"the first token has no log-probability and no alternatives: {scored[0]}")
    check([s.logprob for s in scored[1:]] == plain[1:], f"score's log-probabilities: {scored}")
    among = 0
    for s in scored[1:]:
        top = s.top_logprobs
        check(isinstance(top, tuple) and len(top) == TOP_K
              and all(isinstance(pair, tuple) and len(pair) == 2 for pair in top)
              and len({pair[0] for pair in top}) == TOP_K, f"{TOP_K} (id, logprob) pairs: {s}")
        check(all(a[1] > b[1] or (a[1] == b[1] and a[0] < b[0]) for a, b in zip(top, top[1:])),
              f"the most likely first: {s}")
        for token, logprob in top:
            if token == s.id:
                check(logprob == s.logprob, f"the token's value among them is its own: {s}")
                among += 1
    check(among > 0, f"the greedy tokens are among their alternatives: {scored}")
    check(len(model.score_top(ids, 1)[1].top_logprobs) == 1, "k = 1")
    for k in (0, model.vocab_size + 1):
        expect_error(lambda: model.score_top(ids, k), "PHOTON_ERR_INVALID_ARGUMENT",
                     f"score_top with k = {k}")
    expect_error(lambda: model.score_top([], TOP_K), "PHOTON_ERR_INVALID_ARGUMENT",
                 "nothing to score with alternatives")
    try:
        model.score_top(ids, 2**40)
        raise AssertionError("no OverflowError for k = 2**40")
    except OverflowError as error:
        check(str(error).startswith("photon: k = "), f"{error}")


def test_precision(model, model_path):
    """The precision load option: "exact" by default on the CPU; "bf16" rounds activations to bf16
    before each product, so its scores stay close to the exact ones (not equal); other text fails,
    naming it."""
    check(model.precision == "exact", f"the CPU's default precision: {model.precision!r}")
    ids = model.tokenize(PROMPT)
    exact = model.score(ids)
    with photon.Model(model_path, device="cpu", precision="bf16") as bf16:
        check(bf16.precision == "bf16" and bf16.device == "cpu",
              f"precision {bf16.precision!r} on {bf16.device!r}")
        rounded = bf16.score(ids)
        check(len(rounded) == len(exact) and rounded[0] != rounded[0], "bf16 score's shape")
        for position, (r, e) in enumerate(zip(rounded[1:], exact[1:]), 1):
            check(math.isfinite(r) and abs(r - e) < 0.5, f"token {position}: bf16 {r} vs {e}")
        with prompted(bf16) as session:
            generated = list(session.tokens(4))
            check(len(generated) == 4 and all(t.logprob <= 0 for t in generated),
                  f"a bf16 model generates: {generated}")
    with photon.Model(model_path, precision="exact") as chosen:
        check(chosen.precision == "exact", f"precision exact: {chosen.precision!r}")
    error = expect_error(lambda: photon.Model(model_path, "cpu", precision="fp8"),
                         "PHOTON_ERR_INVALID_ARGUMENT", "precision 'fp8'")
    check("'fp8'" in str(error), f"the bad precision named: {error}")


def windows(n, context, stride):
    """photon_score_options_set_stride's layout: (begin, first scored, end) of each window."""
    out = [(0, 0, min(n, context))]
    while out[-1][2] < n:
        begin = out[-1][0] + stride
        out.append((begin, out[-1][2], min(n, begin + context)))
    return out


def test_long_inputs(shipped_path):
    """Past the context: scoring in sliding windows (each as a score of its own tokens), the
    context shift; and the embedded tokenizer, loaded with verification."""
    with photon.Model(shipped_path, verify=True) as model:
        context = model.context_length
        ids = model.tokenize(" ".join([PROMPT] * (2 * context // 10)))
        check(len(ids) > context, f"{len(ids)} tokens exceed the context {context}")
        for stride, scored in ((context // 2, model.score(ids)),
                               (context // 3, model.score_with_stride(ids, context // 3))):
            expected = [None] * len(ids)
            for begin, first, end in windows(len(ids), context, stride):
                expected[first:end] = model.score(ids[begin:end])[first - begin:]
            check(scored[1:] == expected[1:], f"stride {stride}: windows scored one by one differ")
        expect_error(lambda: model.score_with_stride(ids, context),
                     "PHOTON_ERR_INVALID_ARGUMENT", "a stride of the whole context")
        windowed = model.score_top_with_stride(ids, 2, context // 3)
        check([s.logprob for s in windowed][1:] == scored[1:]
              and all(len(s.top_logprobs) == 2 for s in windowed[1:]),
              "score_top_with_stride scores as score_with_stride")

        options = sampling().set_ignore_eos(True).set_context_length(16)
        with photon.Session(model, options) as session:
            session.prefill(PROMPT)
            check(session.generate(40) < 40 and
                  session.stop_reason == photon.StopReason.CONTEXT_FULL,
                  "without the shift a full context stops")
        check(options.set_context_shift(True) is options, "set_context_shift chains")
        with photon.Session(model, options) as session:
            session.prefill(PROMPT)
            check(session.generate(40) == 40 and session.stop_reason == photon.StopReason.LENGTH
                  and session.position <= 16, f"the shift goes on: {session.position}")

        shipped_tokenizer = pathlib.Path(shipped_path).with_name("tokenizer.model").read_bytes()
        check(model.tokenizer_model() == shipped_tokenizer,
              "the embedded tokenizer is models/tokenizer.model")


def test_arguments(model, model_path):
    """Paths may be os.PathLike, text may be bytes, and anything else gets a plain message."""
    with photon.Model(pathlib.Path(model_path)) as by_path:
        check(by_path.vocab_size == model.vocab_size, "a pathlib.Path model path")
    with photon.Model(model_path, device="cpu") as on_cpu:
        check(on_cpu.device == "cpu" and model.device == "cpu", "the device, cpu by default")
    error = expect_error(lambda: photon.Model(model_path, "gpu"), "PHOTON_ERR_INVALID_ARGUMENT",
                         "device 'gpu'")
    check("'gpu'" in str(error), f"the bad device named: {error}")
    with prompted(model) as from_text, photon.Session(model, sampling()) as from_bytes:
        from_bytes.prefill(PROMPT.encode())
        check(from_bytes.history() == from_text.history(), "a bytes prompt is its UTF-8 text")
    check(model.tokenize(bytearray(b"In"), add_bos=False) == model.tokenize("In", False),
          "tokenize takes bytes-like text")

    def expect(exception_type, call, *words):
        try:
            call()
        except exception_type as error:
            message = str(error)
            check(message.startswith("photon: ") and all(w in message for w in words),
                  f"{exception_type.__name__} message: {message}")
            check("Wrong number or type" not in message and "argument" not in message,
                  f"a raw SWIG message: {message}")
            return
        raise AssertionError(f"no {exception_type.__name__} for {words}")

    with photon.Session(model) as session:
        expect(TypeError, lambda: photon.Model(42), "path", "int")
        expect(TypeError, lambda: photon.Session("model.photon"), "model", "str")
        expect(TypeError, lambda: photon.Session(model, {}), "options", "dict")
        expect(TypeError, lambda: session.prefill(3.5), "prompt", "float")
        expect(TypeError, lambda: session.prefill([1, "2"]), "tokens[1]", "str")
        expect(TypeError, lambda: session.generate("8"), "max_tokens", "str")
        expect(TypeError, lambda: session.generate(8, on_token=42), "on_token", "callable")
        expect(TypeError, lambda: model.tokenize(42), "text", "int")
        expect(TypeError, lambda: photon.SessionOptions().set_temperature("hot"), "temperature")
        expect(TypeError, lambda: photon.Session.restore(model, "state"), "state", "str")
        expect(TypeError, lambda: photon.Session.generate_batch([session, 1], 2), "sessions[1]")
        expect(TypeError, lambda: photon.Session.prefill_batch([session, 1], [[1], [1]]),
               "sessions[1]")
        expect(TypeError, lambda: photon.Session.prefill_batch([session], 3), "token_lists",
               "int")
        expect(TypeError, lambda: photon.Session.prefill_batch([session], [[1, "2"]]),
               "token_lists[0][1]", "str")
        # Integers the library's 32-bit (64-bit unsigned for the seed) parameters cannot hold are
        # errors, never wrapped: token 2**32 + 5 is not token 5.
        expect(OverflowError, lambda: session.prefill([model.bos, 2**32 + 5]), "tokens[1]",
               str(2**32 + 5))
        expect(OverflowError, lambda: model.detokenize([-2**31 - 1]), "tokens[0]")
        expect(OverflowError, lambda: model.score([1, 2**31]), "tokens[1]")
        expect(OverflowError, lambda: session.generate(2**32 + 3), "max_tokens", str(2**32 + 3))
        expect(OverflowError, lambda: photon.SessionOptions().set_context_length(2**31),
               "context_length")
        expect(OverflowError, lambda: photon.SessionOptions().set_seed(-1), "seed")
        expect(OverflowError, lambda: photon.SessionOptions().set_seed(2**64), "seed")
        expect(ValueError, lambda: session.tokens(-1), "max_tokens")
        check(session.position == 0, "a rejected prefill consumed nothing")
        photon.SessionOptions().set_seed(2**64 - 1)  # the largest seed is fine


def test_threads(model):
    """Calls release the interpreter lock: while one thread generates without a callback, a
    second session generates on this thread, and cancel() stops the first. Speed is measured by
    bench/python_threads.py, not here."""
    endless = photon.SessionOptions().set_ignore_eos(True)
    with photon.Session(model, endless) as first, prompted(model) as second:
        first.prefill(PROMPT)
        budget = model.context_length - first.position
        run = {}

        def generate_first():
            run["start"] = time.monotonic()
            run["count"] = first.generate(budget)
            run["end"] = time.monotonic()

        worker = threading.Thread(target=generate_first)
        worker.start()
        while "start" not in run:
            time.sleep(0.001)
        stamps = []
        second.generate(20, lambda token: stamps.append(time.monotonic()))
        check(worker.is_alive(), "the second session waited for the first to finish")
        # The first session serves one call at a time: a second one fails instead of racing.
        expect_error(lambda: first.prefill([1]), "PHOTON_ERR_INVALID_ARGUMENT",
                     "a call while another thread's call runs")
        expect_error(first.close, "PHOTON_ERR_INVALID_ARGUMENT", "close() while generating")
        while worker.is_alive():  # each call clears an earlier cancel on entry: repeat it
            first.cancel()
            worker.join(0.01)
        check(first.stop_reason == photon.StopReason.CANCELLED and run["count"] < budget,
              f"cancel() from another thread: {first.stop_reason!r}, {run['count']} of {budget}")
        check(first.position == model.context_length - budget + run["count"], "cancelled count")
        inside = sum(run["start"] < stamp < run["end"] for stamp in stamps)
        check(len(stamps) == 20 and inside == 20,
              f"the second session ran while the first generated: {inside} of {len(stamps)}")

        def reenter(token):
            second.generate(1)
        expect_error(lambda: second.generate(2, reenter), "PHOTON_ERR_INVALID_ARGUMENT",
                     "changing the session from its own callback")
        lengths = []
        second.generate(2, lambda token: lengths.append(len(second.history())))
        check(lengths == [second.position - 1, second.position], f"history() in a callback")


def stub_signatures(node):
    """{name: parameter names (with '=' for a default), or 'property'} of a stub class."""
    members = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            if any(getattr(d, "id", None) == "property" for d in item.decorator_list):
                members[item.name] = "property"
                continue
            arguments = item.args.posonlyargs + item.args.args
            defaults = len(item.args.defaults)
            names = [a.arg + ("=" if i >= len(arguments) - defaults else "")
                     for i, a in enumerate(arguments)]
            names += [a.arg + ("=" if default is not None else "")
                      for a, default in zip(item.args.kwonlyargs, item.args.kw_defaults)]
            members[item.name] = [n for n in names if n != "self"]
        elif isinstance(item, ast.AnnAssign):
            members[item.target.id] = "field"
        elif isinstance(item, ast.Assign):
            members[item.targets[0].id] = "field"
    return members


def runtime_signature(value):
    if isinstance(value, property):
        return "property"
    parameters = inspect.signature(value).parameters.values()
    return [p.name + ("=" if p.default is not p.empty else "") for p in parameters
            if p.name != "self"]


def test_stubs():
    """photon/__init__.pyi names the public API exactly, with the same parameters."""
    stub = ast.parse(pathlib.Path(photon.__file__).with_suffix(".pyi").read_text())
    classes = {node.name: node for node in stub.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in stub.body if isinstance(node, ast.FunctionDef)}
    check(set(classes) | functions == set(photon.__all__), f"stub names: {sorted(classes)}")
    for name, node in classes.items():
        runtime = getattr(photon, name)
        stubbed = stub_signatures(node)
        if issubclass(runtime, Exception):  # PhotonError: its attributes are set per instance
            check(issubclass(runtime, RuntimeError) and set(stubbed) == {"status", "status_name"},
                  f"{name}: {sorted(stubbed)}")
            continue
        if runtime is photon.Token:  # its fields, the alternatives and its constructor
            check(set(stubbed) == {*runtime._fields, "top_logprobs", "__new__"}
                  and all(stubbed[f] == "property" for f in runtime._fields)
                  and stubbed["__new__"] == runtime_signature(runtime.__new__),
                  f"{name}: {stubbed} vs {runtime._fields}")
            continue
        if issubclass(runtime, (int, tuple)):  # the enums and the stats: their members
            fields = [m.name for m in runtime] if issubclass(runtime, int) else runtime._fields
            check(set(stubbed) == set(fields), f"{name}: {sorted(stubbed)} vs {fields}")
            continue
        public = {n for n in dir(runtime) if not n.startswith("_") and n != "thisown"}
        check(set(stubbed) - {"__init__", "__enter__", "__exit__"} == public,
              f"{name}: stub {sorted(stubbed)} vs runtime {sorted(public)}")
        for member, signature in stubbed.items():
            if member in ("__enter__", "__exit__"):
                continue
            actual = runtime_signature(inspect.getattr_static(runtime, member))
            if isinstance(inspect.getattr_static(runtime, member), staticmethod):
                actual = runtime_signature(getattr(runtime, member))
            check(actual == signature, f"{name}.{member}: stub {signature} vs runtime {actual}")


def test_save_restore(model, workdir):
    with prompted(model) as session:
        session.generate(6)
        state = session.save()
        path = os.path.join(workdir, "python.state")
        session.save_file(path)
        history = session.history()
        expected = [t.id for t in session.tokens(8)]
    check(isinstance(state, bytes) and len(state) > 0, "save() gives bytes")
    restored_sessions = (photon.Session.restore(model, state),
                         photon.Session.restore_file(model, path))
    for restored in restored_sessions:
        with restored:
            check(restored.history() == history, "the restored history")
            check([t.id for t in restored.tokens(8)] == expected, "the restored continuation")
    with photon.Session.restore(model, bytearray(state)) as restored:
        restored.set_sampler(photon.SessionOptions())  # greedy from here on
        check(restored.generate(2) == 2, "set_sampler on a restored session")


def rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def churn(model_path, iteration, close):
    model = photon.Model(model_path)
    small = photon.SessionOptions().set_context_length(256).set_seed(iteration)
    session = photon.Session(model, small)
    session.prefill([model.bos])
    session.generate(1)
    restored = photon.Session.restore(model, session.save())
    next(restored.tokens(1))
    if close:  # in a different order each time: a session keeps its model alive
        [model, session, restored][iteration % 3].close()
        for item in (restored, model, session):
            item.close()


def test_memory(model_path):
    for i in range(WARMUP):
        churn(model_path, i, close=True)
    gc.collect()
    baseline = rss_mb()
    for i in range(LOOPS):
        churn(model_path, i, close=True)
    closed = rss_mb()
    for i in range(LATE_LOOPS):  # nothing closed: the objects go when the collector gets to them
        churn(model_path, i, close=False)
        if i % 10 == 0:
            gc.collect()
    gc.collect()
    late = rss_mb()
    print(f"rss: {baseline:.1f} MB after warm-up, {closed:.1f} MB after {LOOPS} closed loops, "
          f"{late:.1f} MB after {LATE_LOOPS} collected ones")
    check(closed - baseline < CLOSED_BOUND_MB and late - baseline < LATE_BOUND_MB, "memory grows")


# ---- the serving engine ----------------------------------------------------------------------

ENGINE_TOKENS = 8
ENGINE_WAIT_S = 120  # a bound for waits that end within a second when all is well
# RSS growth allowed over the engine loops: a leaked engine holds ~75 kB, a leaked request its
# session's caches (~1 MB), so 200 loops of either leak exceed these.
ENGINE_CLOSED_BOUND_MB, ENGINE_LATE_BOUND_MB = 8, 16


def greedy():
    return photon.SessionOptions().set_ignore_eos(True)


def alone(model, prompt, max_tokens=ENGINE_TOKENS):
    """The token ids a session alone generates greedily after prompt: what a request must give."""
    with photon.Session(model, greedy()) as session:
        session.prefill(prompt)
        return [t.id for t in session.tokens(max_tokens)]


def pull_all(request, into):
    into.extend(t.id for t in request.tokens())


def test_engine_streams(model):
    """Requests streamed at once, pulled by iterators on threads and pushed to callbacks: each
    gives exactly the tokens of its session run alone; statistics count them."""
    expected = [alone(model, prompt) for prompt in BATCH_PROMPTS]
    with photon.Engine(model, max_running=4) as engine:
        engine.start()
        pulled = [engine.submit(prompt, options=greedy(), max_tokens=ENGINE_TOKENS)
                  for prompt in BATCH_PROMPTS]
        pushed_tokens = [[] for _ in BATCH_PROMPTS]
        pushed = [engine.submit(model.tokenize(prompt), options=greedy(),
                                max_tokens=ENGINE_TOKENS, on_token=pushed_tokens[i].append)
                  for i, prompt in enumerate(BATCH_PROMPTS)]
        pulled_ids = [[] for _ in pulled]
        threads = [threading.Thread(target=pull_all, args=(request, ids))
                   for request, ids in zip(pulled, pulled_ids)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(ENGINE_WAIT_S)
        check(pulled_ids == expected, f"pulled tokens: {pulled_ids} vs alone {expected}")
        check(all(request.wait(ENGINE_WAIT_S) for request in pushed), "the callbacks' requests end")
        pushed_ids = [[t.id for t in tokens] for tokens in pushed_tokens]
        check(pushed_ids == expected, f"pushed tokens: {pushed_ids} vs alone {expected}")
        check(all(t.logprob <= 0 for tokens in pushed_tokens for t in tokens), "log probabilities")
        for request, prompt in zip(pulled + pushed, BATCH_PROMPTS * 2):
            stats = request.stats()
            check(request.state == photon.RequestState.FINISHED
                  and request.stop_reason == photon.StopReason.LENGTH and request.error is None,
                  f"finished by length: {request.state!r} {request.stop_reason!r}")
            check(stats.generated_tokens == ENGINE_TOKENS
                  and stats.prompt_tokens == len(model.tokenize(prompt))
                  and stats.reused_tokens == 0 and stats.pauses == 0, f"request stats: {stats}")
            check(0 <= stats.queue_seconds <= stats.first_token_seconds
                  and stats.decode_seconds >= 0, f"request times: {stats}")
        engine.stop()  # the worker's last step has retired every request
        stats = engine.stats()
        total = 2 * len(BATCH_PROMPTS)
        check(stats.submitted == total and stats.finished == total and stats.failed == 0
              and stats.generated_tokens == total * ENGINE_TOKENS and stats.running == 0
              and stats.waiting == 0 and stats.steps > 0 and stats.memory_peak > 0
              and stats.memory_in_use == 0, f"engine stats: {stats}")


def test_engine_top_logprobs(model):
    """A request's alternatives (SessionOptions.set_top_logprobs) are its session's alone, pulled
    and pushed to a callback alike."""
    options = greedy().set_top_logprobs(TOP_K)
    with photon.Session(model, options) as session:
        session.prefill(PROMPT)
        expected = list(session.tokens(ENGINE_TOKENS))
    check(all(len(t.top_logprobs) == TOP_K for t in expected), f"alternatives: {expected}")
    with photon.Engine(model) as engine:
        engine.start()
        pushed = []
        pushing = engine.submit(PROMPT, options=options, max_tokens=ENGINE_TOKENS,
                                on_token=pushed.append)
        pulled = list(engine.submit(PROMPT, options=options, max_tokens=ENGINE_TOKENS).tokens())
        check(pushing.wait(ENGINE_WAIT_S), "the callback's request ends")
        plain = list(engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS).tokens())
        engine.stop()
    check(with_alternatives(pulled) == with_alternatives(expected),
          f"pulled alternatives: {pulled} vs alone {expected}")
    check(with_alternatives(pushed) == with_alternatives(expected),
          f"pushed alternatives: {pushed} vs alone {expected}")
    check([t.top_logprobs for t in plain] == [()] * ENGINE_TOKENS, f"k = 0: {plain}")


def test_engine_asyncio(model):
    """The pull iterator from asyncio, through the default executor (it releases the interpreter
    lock while it waits): two requests stream concurrently into one event loop."""
    expected = [alone(model, prompt) for prompt in BATCH_PROMPTS[:2]]

    async def collect(request):
        loop = asyncio.get_running_loop()
        tokens = request.tokens()
        ids = []
        while (token := await loop.run_in_executor(None, next, tokens, None)) is not None:
            ids.append(token.id)
        return ids

    async def serve(engine):
        requests = [engine.submit(prompt, options=greedy(), max_tokens=ENGINE_TOKENS)
                    for prompt in BATCH_PROMPTS[:2]]
        return await asyncio.wait_for(asyncio.gather(*(collect(r) for r in requests)),
                                      ENGINE_WAIT_S)

    with photon.Engine(model) as engine:
        engine.start()
        results = asyncio.run(serve(engine))
        engine.stop()
    check(results == expected, f"asyncio streams: {results} vs alone {expected}")


def test_engine_future(model):
    """future() resolves once, after the last token, with the stop reason (a request finished
    already: at once), with on_token's exception, or with CANCELLED for a request closed before it
    finished; its done callbacks run on the engine's thread, may close the request and may not
    wait for it; asyncio awaits it through wrap_future."""
    with photon.Engine(model) as engine:
        engine.start()
        tokens = []
        pushed = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS,
                               on_token=tokens.append)
        at_end = []
        pushed.future().add_done_callback(lambda future: at_end.append(len(tokens)))
        check(pushed.future().result(ENGINE_WAIT_S) == photon.StopReason.LENGTH
              and pushed.future() is pushed.future(), "resolved by length, one future")
        check(at_end == [ENGINE_TOKENS], f"resolved after the last token: {at_end}")
        pulled = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        check(len(list(pulled.tokens())) == ENGINE_TOKENS
              and pulled.future().result(0) == photon.StopReason.LENGTH,
              "a finished request's future is resolved at once")

        def fail(token):
            raise CallbackFailure("fails")

        failing = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS, on_token=fail)
        check(isinstance(failing.future().exception(ENGINE_WAIT_S), CallbackFailure),
              "on_token's exception")

        async def awaited():
            request = engine.submit(PROMPT, options=greedy(), max_tokens=2)
            return await asyncio.wait_for(asyncio.wrap_future(request.future()), ENGINE_WAIT_S)

        check(asyncio.run(awaited()) == photon.StopReason.LENGTH, "awaited from asyncio")
        endless = engine.submit(PROMPT, options=greedy(), on_token=lambda token: True)
        abandoned = endless.future()
        endless.close()
        check(abandoned.result(ENGINE_WAIT_S) == photon.StopReason.CANCELLED,
              "closed before it finished")
        closed_first = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        closed_first.close()
        check(isinstance(closed_first.future().exception(0), photon.PhotonError),
              "a closed request's future holds its error")
        engine.stop()
    with photon.Engine(model) as stepped:
        closing = stepped.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        waiting = stepped.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        seen = {}

        def close_it(future):
            seen["state"] = closing.state
            closing.close()

        def wait_for_it(future):
            try:
                waiting.wait(1)
            except photon.PhotonError as error:
                seen["error"] = error

        closing.future().add_done_callback(close_it)
        waiting.future().add_done_callback(wait_for_it)
        steps = 0
        while stepped.step() > 0 and steps < 1000:
            steps += 1
        check(seen.get("state") == photon.RequestState.FINISHED and closing.closed,
              f"closed in its done callback: {seen}")
        check("finish callback" in str(seen.get("error")), f"waiting refused: {seen}")
        waiting.close()


def test_engine_stepped(model):
    """An engine stepped by the caller's loop: nothing happens between steps."""
    expected = alone(model, PROMPT)
    with photon.Engine(model) as engine:
        request = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        check(request.state == photon.RequestState.WAITING and not request.wait(0),
              "waiting before the first step")
        check(request.stats().queue_seconds != request.stats().queue_seconds, "NaN before admission")
        steps = 0
        while engine.step() > 0 and steps < 1000:
            steps += 1
        check(request.wait(0) and [t.id for t in request.tokens()] == expected,
              "a stepped request gives the tokens of its session alone")
        check(engine.step() == 0, "a step with nothing to do")
        expect_error(lambda: engine.stop(), "PHOTON_ERR_INVALID_ARGUMENT", "stop without a worker")


def test_engine_prefix_cache(model):
    """With a prefix cache, a request whose prompt is a prompt read before starts from its save: those tokens count as reused, the engine counts the hit and the cache's bytes, and
    both requests generate what an engine without the cache generates."""
    first = model.tokenize(f"{PROMPT} {BATCH_PROMPTS[1]}")
    # The same prompt again: a RecGen model (the test model's AUTO mode) restores only that.
    second = list(first)

    def run(engine, prompt):
        request = engine.submit(prompt, options=greedy(), max_tokens=ENGINE_TOKENS)
        while engine.step() > 0:
            pass
        return request, [(t.id, t.logprob) for t in request.tokens()]

    with photon.Engine(model) as uncached:
        expected = [run(uncached, prompt)[1] for prompt in (first, second)]
        check(uncached.stats().prefix_hits == 0 and uncached.stats().prefix_bytes == 0,
              f"no cache: {uncached.stats()}")
    with photon.Engine(model, prefix_cache=64 << 20) as engine:
        request, got_first = run(engine, first)
        stats = engine.stats()
        check(request.stats().reused_tokens == 0 and stats.prefix_hits == 0
              and stats.prefix_bytes > 0, f"the first prompt is read and saved: {stats}")
        request, got_second = run(engine, second)
        check(request.stats().reused_tokens == len(first)
              and request.stats().prompt_tokens == len(second) - len(first),
              f"the second starts from the first's save: {request.stats()} ({len(first)} tokens)")
        stats = engine.stats()
        check(stats.prefix_hits == 1 and stats.prefix_bytes > 0
              and stats.reused_tokens == len(first), f"the hit is counted: {stats}")
    check([got_first, got_second] == expected,
          f"the cache changes no result: {[got_first, got_second]} vs {expected}")


def test_engine_cancel(model):
    """cancel() from another thread ends a streaming request (pulled or pushed) at the next step;
    the other requests go on."""
    with photon.Engine(model) as engine:
        engine.start()
        endless = engine.submit(PROMPT, options=greedy())  # up to the context length
        got = []
        puller = threading.Thread(target=pull_all, args=(endless, got))
        puller.start()
        pushed = []
        endless_pushed = engine.submit(PROMPT, options=greedy(), on_token=pushed.append)
        beside = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        deadline = time.monotonic() + ENGINE_WAIT_S
        while (len(got) < 2 or len(pushed) < 2) and time.monotonic() < deadline:
            time.sleep(0.005)
        canceller = threading.Thread(target=lambda: (endless.cancel(), endless_pushed.cancel()))
        canceller.start()
        canceller.join()
        puller.join(ENGINE_WAIT_S)
        check(not puller.is_alive(), "the iterator ends after cancel()")
        for request, tokens in ((endless, got), (endless_pushed, pushed)):
            check(request.wait(ENGINE_WAIT_S) and request.stop_reason == photon.StopReason.CANCELLED,
                  f"cancelled: {request.stop_reason!r}")
            check(2 <= len(tokens) < model.context_length and request.stats().generated_tokens ==
                  len(tokens), f"tokens before the cancel: {len(tokens)}")
        check(beside.wait(ENGINE_WAIT_S) and beside.stop_reason == photon.StopReason.LENGTH,
              "the request beside goes on")
        engine.stop(drain=False)
        check(engine.stats().cancelled == 2, f"engine stats: {engine.stats()}")


def test_engine_callbacks(model):
    """A callback returning False stops its request alone; one that raises stops it and the
    exception comes out of wait(); one that waits on its own engine gets an error, not a
    deadlock; a request closed from its own callback just ends."""
    with photon.Engine(model) as engine:
        engine.start()
        seen = []
        stopped = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS,
                                on_token=lambda token: seen.append(token) or False)
        failures = []

        def fail_on_second(token):
            failures.append(token)
            if len(failures) == 2:
                raise CallbackFailure("stop here")

        failing = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS,
                                on_token=fail_on_second)
        beside = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        check(stopped.wait(ENGINE_WAIT_S) and len(seen) == 1
              and stopped.stop_reason == photon.StopReason.CALLBACK, "False stops the request")
        try:
            failing.wait(ENGINE_WAIT_S)
            raise AssertionError("the callback's exception was swallowed")
        except CallbackFailure as error:
            check(str(error) == "stop here", "the very exception reaches wait()")
        check(len(failures) == 2 and failing.stop_reason == photon.StopReason.CALLBACK,
              f"the exception stopped its request: {len(failures)}")
        check([t.id for t in beside.tokens()] == alone(model, PROMPT), "the others go on")

        def wait_inside(token):
            beside.wait(1)

        waiting = engine.submit(PROMPT, max_tokens=2, on_token=wait_inside)
        error = expect_error(lambda: waiting.wait(ENGINE_WAIT_S), "PHOTON_ERR_INVALID_ARGUMENT",
                             "waiting on the engine from its own callback")
        check("callback" in str(error), f"the message says why: {error}")
        holder, ready = [], threading.Event()

        def close_itself(token):
            ready.wait(ENGINE_WAIT_S)
            holder[0].close()

        holder.append(engine.submit(PROMPT, on_token=close_itself))
        ready.set()
        deadline = time.monotonic() + ENGINE_WAIT_S
        while not holder[0].closed and time.monotonic() < deadline:
            time.sleep(0.005)
        check(holder[0].closed, "closed from its own callback")
        after = engine.submit(PROMPT, options=greedy(), max_tokens=2)
        check(after.wait(ENGINE_WAIT_S) and after.stats().generated_tokens == 2,
              "the engine serves on")
        engine.stop()


def test_engine_errors(model):
    """A full queue is BusyError; a request that fails ends with its error, which the iterator
    raises; wrong arguments get plain messages; closed objects refuse calls."""
    with photon.Engine(model, max_waiting=1) as engine:
        first = engine.submit(PROMPT, max_tokens=1)
        error = expect_error(lambda: engine.submit(PROMPT, max_tokens=1), "PHOTON_ERR_BUSY",
                             "a full waiting queue")
        check(isinstance(error, photon.BusyError), f"BusyError: {error!r}")
        check(engine.stats().refused == 1, "refused submissions are counted")
        first.close()
    with photon.Engine(model, memory_budget=1) as engine:
        request = engine.submit(PROMPT, max_tokens=4)
        while engine.step() > 0:
            pass
        check(request.stop_reason == photon.StopReason.ERROR, f"{request.stop_reason!r}")
        check(isinstance(request.error, photon.PhotonError)
              and request.error.status_name == "PHOTON_ERR_OUT_OF_MEMORY"
              and "budget" in str(request.error), f"the request's error: {request.error!r}")
        expect_error(lambda: list(request.tokens()), "PHOTON_ERR_OUT_OF_MEMORY",
                     "the iterator of a failed request")
        expect_error(request.save, "PHOTON_ERR_INVALID_ARGUMENT", "save of a failed request")
        check(engine.stats().failed == 1, "failed requests are counted")
    with photon.Engine(model) as engine:
        expect_error(lambda: engine.submit(max_tokens=1), "PHOTON_ERR_INVALID_ARGUMENT",
                     "a request without a prompt")
        expect_error(lambda: engine.submit([model.vocab_size]), "PHOTON_ERR_BAD_TOKEN",
                     "a token outside the vocabulary")
        for call, words in ((lambda: engine.submit(3.5), "prompt"),
                            (lambda: engine.submit(PROMPT, on_token=42), "on_token"),
                            (lambda: engine.submit(PROMPT, options={}), "options"),
                            (lambda: engine.submit(PROMPT, session="s"), "session"),
                            (lambda: photon.Engine("model.photon"), "model")):
            try:
                call()
                raise AssertionError(f"no TypeError for {words}")
            except TypeError as error:
                check(str(error).startswith("photon: ") and words in str(error), f"{error}")
        expect_error(lambda: photon.Engine(model, max_running=0), "PHOTON_ERR_INVALID_ARGUMENT",
                     "max_running 0")
        pulled = engine.submit(PROMPT, max_tokens=1, on_token=lambda token: None)
        expect_error(lambda: next(pulled.tokens()), "PHOTON_ERR_INVALID_ARGUMENT",
                     "pulling a request that has a callback")
        pulled.close()
        pulled.close()  # idempotent
        check(pulled.closed, "closed")
        expect_error(lambda: pulled.state, "PHOTON_ERR_INVALID_ARGUMENT", "use after close")
    check(engine.closed, "leaving the with block closes")
    expect_error(lambda: engine.submit(PROMPT), "PHOTON_ERR_INVALID_ARGUMENT", "closed engine")


def test_engine_continue(model):
    """A finished request's state and session continue it exactly as the session alone would."""
    expected = alone(model, PROMPT, 2 * ENGINE_TOKENS)
    with photon.Engine(model) as engine:
        first = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
        while engine.step() > 0:
            pass
        check([t.id for t in first.tokens()] == expected[:ENGINE_TOKENS], "the first half")
        state = first.save()
        session = first.take_session()
        expect_error(first.take_session, "PHOTON_ERR_INVALID_ARGUMENT", "a session taken twice")
        position = session.position
        by_state = engine.submit(state=state, options=greedy(), max_tokens=ENGINE_TOKENS)
        by_session = engine.submit(session=session, max_tokens=ENGINE_TOKENS)
        check(session.closed, "the request took the session over")
        while engine.step() > 0:
            pass
        for request in (by_state, by_session):
            check([t.id for t in request.tokens()] == expected[ENGINE_TOKENS:],
                  "the continuation equals the session's alone")
            check(request.stats().reused_tokens == position, f"reused: {request.stats()}")
        with by_session.take_session() as again:
            check(again.position == position + ENGINE_TOKENS, "the taken session's history")
        with photon.Session.restore(model, by_state.save()) as restored:
            check(restored.position == position + ENGINE_TOKENS, "a request's state restores")


def test_engine_ownership(model_path):
    """A request keeps its engine alive and the engine its model: closing them first (or letting
    them go) leaves the request streaming."""
    expected = None
    with photon.Model(model_path) as model:
        expected = alone(model, PROMPT)
    model = photon.Model(model_path)
    engine = photon.Engine(model)
    model.close()
    engine.start()
    request = engine.submit(PROMPT, options=greedy(), max_tokens=ENGINE_TOKENS)
    engine.close()
    del engine
    gc.collect()
    check([t.id for t in request.tokens()] == expected, "the request outlives its engine handle")
    request.close()  # the engine (and its worker) goes now
    pushed = []
    request = photon.Engine(photon.Model(model_path)).submit(PROMPT, options=greedy(),
                                                            max_tokens=2, on_token=pushed.append)
    gc.collect()
    check(request.state == photon.RequestState.WAITING, "an engine never started steps nothing")
    request.close()
    # The last reference to a started engine, dropped inside one of its own callbacks: the engine
    # cannot be freed on its worker's thread, and is freed once the callback has returned.
    engine = photon.Engine(photon.Model(model_path))
    engine.start()
    holder, ready, closed = [], threading.Event(), threading.Event()

    def close_last(token):
        ready.wait(ENGINE_WAIT_S)
        holder[0].close()
        closed.set()

    holder.append(engine.submit(PROMPT, on_token=close_last))
    engine.close()
    ready.set()
    check(closed.wait(ENGINE_WAIT_S) and holder[0].closed, "the last request closed itself")


EXIT_WITH_A_RUNNING_ENGINE = """
import sys, time, photon
model = photon.Model(sys.argv[1])
engine = photon.Engine(model)
engine.start()
seen = []
endless = photon.SessionOptions().set_ignore_eos(True)
# A slow callback: the worker is in it, or waits for the interpreter lock, when the exit comes.
request = engine.submit("In the beginning", options=endless,
                        on_token=lambda token: (seen.append(token), time.sleep(0.002)))
pulled = engine.submit("In the beginning", options=endless)
if sys.argv[2] == "closed":
    engine.close()  # only the requests hold the engine now
while len(seen) < 2:
    time.sleep(0.005)
"""


def test_engine_exit(model_path):
    """An interpreter that exits while an engine's worker runs callbacks (its handle open, or
    closed and held by requests) exits cleanly: the callbacks end before it finalizes."""
    for handle in ("open", "closed"):
        result = subprocess.run([sys.executable, "-c", EXIT_WITH_A_RUNNING_ENGINE, model_path,
                                 handle], capture_output=True, text=True, timeout=ENGINE_WAIT_S)
        check(result.returncode == 0, f"exit with a running engine ({handle} handle): "
              f"{result.returncode} {result.stderr}")


def churn_engine(model_path, iteration, close):
    """A model with an engine and two requests (pulled, pushed) run to the end (every tenth by its
    worker), one continued from a state, one session taken back."""
    model = photon.Model(model_path)
    small = photon.SessionOptions().set_context_length(256).set_seed(iteration)
    engine = photon.Engine(model, max_running=2)
    pulled = engine.submit([model.bos, 5 + iteration % 50], options=small, max_tokens=2)
    pushed = engine.submit([model.bos], options=small, max_tokens=2, on_token=lambda token: None)
    if iteration % 10 == 0:
        engine.start()
        pulled.wait(ENGINE_WAIT_S)
        engine.stop()
    while engine.step() > 0:
        pass
    check(len(list(pulled.tokens())) == 2 and pushed.wait(ENGINE_WAIT_S), "a churned request")
    continued = engine.submit(state=pushed.save(), max_tokens=1)
    session = pulled.take_session()
    if close:  # in a different order each time: requests keep their engine and model alive
        items = [model, engine, pulled, pushed, continued, session]
        items[iteration % len(items)].close()
        for item in items:
            item.close()


def test_engine_memory(model_path):
    for i in range(WARMUP):
        churn_engine(model_path, i, close=True)
    gc.collect()
    baseline = rss_mb()
    for i in range(LOOPS):
        churn_engine(model_path, i, close=True)
    closed = rss_mb()
    for i in range(LATE_LOOPS):  # nothing closed: the objects go when the collector gets to them
        churn_engine(model_path, i, close=False)
        if i % 10 == 0:
            gc.collect()
    gc.collect()
    late = rss_mb()
    print(f"rss: {baseline:.1f} MB after warm-up, {closed:.1f} MB after {LOOPS} closed engine "
          f"loops, {late:.1f} MB after {LATE_LOOPS} collected ones")
    check(closed - baseline < ENGINE_CLOSED_BOUND_MB and late - baseline < ENGINE_LATE_BOUND_MB,
          "memory grows")

def cross_save(model_path, state_path, out_path):
    with photon.Model(model_path) as model, prompted(model) as session:
        session.generate(5)
        session.save_file(state_path)
        write_continuation(session, out_path)


def cross_restore(model_path, state_path, out_path):
    with photon.Model(model_path) as model:
        with photon.Session.restore_file(model, state_path) as session:
            write_continuation(session, out_path)


def write_continuation(session, out_path):
    with open(out_path, "w") as out:
        out.write(" ".join(str(t.id) for t in session.tokens(8)) + "\n")


def main(argv):
    mode, model_path = argv[1], argv[2]
    if mode == "test":
        workdir = argv[3]
        os.makedirs(workdir, exist_ok=True)
        with photon.Model(model_path) as model:
            for test in (test_model, test_streaming, test_cancel, test_cancel_iterator,
                         test_callback_exception,
                         test_batch, test_score, test_score_top, test_kv_type,
                         test_sampler_settings,
                         test_top_logprobs, test_threads):
                test(model)
                print(f"ok {test.__name__}")
            test_arguments(model, model_path)
            print("ok test_arguments")
            test_long_inputs(argv[4])
            print("ok test_long_inputs")
            test_stubs()
            print("ok test_stubs")
            test_errors(model, model_path, workdir)
            print("ok test_errors")
            test_save_restore(model, workdir)
            print("ok test_save_restore")
            test_thread_count(model, model_path)
            print("ok test_thread_count")
            test_precision(model, model_path)
            print("ok test_precision")
    elif mode == "memory":
        test_memory(model_path)
    elif mode == "engine":
        with photon.Model(model_path) as model:
            for test in (test_engine_streams, test_engine_top_logprobs, test_engine_asyncio,
                         test_engine_future, test_engine_stepped, test_engine_prefix_cache,
                         test_engine_cancel,
                         test_engine_callbacks, test_engine_errors, test_engine_continue):
                test(model)
                print(f"ok {test.__name__}")
        test_engine_ownership(model_path)
        print("ok test_engine_ownership")
        test_engine_exit(model_path)
        print("ok test_engine_exit")
    elif mode == "engine-memory":
        test_engine_memory(model_path)
    elif mode == "save":
        cross_save(model_path, argv[3], argv[4])
    elif mode == "restore":
        cross_restore(model_path, argv[3], argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
