#!/usr/bin/env python3
"""Tests of the Python binding, run by ctest with the package on PYTHONPATH.

    binding_test.py test MODEL WORKDIR        streaming, cancel, errors, save / restore
    binding_test.py memory MODEL              create and free models and sessions in a loop
    binding_test.py save MODEL STATE OUT      cross-language: save a state, write the continuation
    binding_test.py restore MODEL STATE OUT   cross-language: restore it, write the continuation

Every language binding implements the same modes with the same prompt, sampler and budgets, so
that the continuations written by save and restore can be compared across languages.
"""
import gc
import os
import sys

import photon

PROMPT = "In the beginning God created the heaven and the earth."
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
    check(photon.version().count(".") == 2, "version")


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


def test_threads(model, model_path):
    with prompted(model) as session:
        expected = [t.id for t in session.tokens(8)]
    with photon.Model(model_path, 1) as single, prompted(single) as session:
        check([t.id for t in session.tokens(8)] == expected, "one thread gives the same tokens")
    expect_error(lambda: photon.Model(model_path, -1), "PHOTON_ERR_INVALID_ARGUMENT",
                 "negative threads")


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
            for test in (test_model, test_streaming, test_cancel, test_callback_exception,
                         test_batch):
                test(model)
                print(f"ok {test.__name__}")
            test_errors(model, model_path, workdir)
            print("ok test_errors")
            test_save_restore(model, workdir)
            print("ok test_save_restore")
            test_threads(model, model_path)
            print("ok test_threads")
    elif mode == "memory":
        test_memory(model_path)
    elif mode == "save":
        cross_save(model_path, argv[3], argv[4])
    elif mode == "restore":
        cross_restore(model_path, argv[3], argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
