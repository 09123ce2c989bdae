#!/usr/bin/env python3
"""Python sessions on threads: does generation on one thread let the others run?

    PYTHONPATH=build/bindings/python python3 bench/python_threads.py \
        [--model models/photon-kjv.photon] [--sessions 2] [--tokens 200] [--repeats 3]

Runs SESSIONS sessions of one model, TOKENS tokens each (greedy, EOS ignored), first one after
the other on the main thread, then each on its own thread, with and without a token callback, and
prints the aggregate tokens per second and the speedup of the threads. Calls release the
interpreter lock, so the threaded runs scale with the cores free for them; the model is loaded with
one thread per call (Model(path, threads=1)), which keeps the library's own parallelism out of the
comparison. A measurement, not a test.
"""
import argparse
import os
import statistics
import threading
import time

import photon

PROMPT = "In the beginning God created the heaven and the earth."


def open_sessions(model, count):
    options = photon.SessionOptions().set_ignore_eos(True).set_mode(photon.Mode.HIERGEN)
    sessions = [photon.Session(model, options) for _ in range(count)]
    for session in sessions:
        session.prefill(PROMPT)
    return sessions


def run(model, count, tokens, threaded, callback):
    """Seconds for `count` sessions to generate `tokens` tokens each."""
    sessions = open_sessions(model, count)
    on_token = (lambda token: None) if callback else None
    work = [lambda s=session: s.generate(tokens, on_token) for session in sessions]
    start = time.perf_counter()
    if threaded:
        threads = [threading.Thread(target=job) for job in work]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for job in work:
            job()
    elapsed = time.perf_counter() - start
    if any(session.stop_reason != photon.StopReason.LENGTH for session in sessions):
        raise SystemExit("a session stopped before its budget (context full?)")
    for session in sessions:
        session.close()
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/photon-kjv.photon")
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"photon {photon.__version__}, {args.model}, {args.sessions} sessions x {args.tokens} "
          f"tokens, 1 thread per call, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, median of {args.repeats}")
    print("| callback | sequential tok/s | threaded tok/s | speedup |")
    print("|---|---|---|---|")
    with photon.Model(args.model, threads=1) as model:
        run(model, 1, 8, False, False)  # warm-up: weights bound, caches allocated once
        total = args.sessions * args.tokens
        for callback in (False, True):
            sequential = statistics.median(
                run(model, args.sessions, args.tokens, False, callback)
                for _ in range(args.repeats))
            threaded = statistics.median(
                run(model, args.sessions, args.tokens, True, callback)
                for _ in range(args.repeats))
            print(f"| {'yes' if callback else 'no'} | {total / sequential:.0f} | "
                  f"{total / threaded:.0f} | {sequential / threaded:.2f}x |")


if __name__ == "__main__":
    main()
