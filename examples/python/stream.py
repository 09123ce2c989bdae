#!/usr/bin/env python3
"""stream -- load a PHOTON model, stream a completion through a callback and through an
iterator, save the session, restore it and continue.

    PYTHONPATH=build/bindings/python python3 examples/python/stream.py [MODEL] [PROMPT] [N]

MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
"In the beginning", N (tokens per step) to 16.
"""
import sys

import photon


def show(token):
    print(token.piece, end="", flush=True)


def main(argv):
    path = argv[1] if len(argv) > 1 else "models/photon-kjv.photon"
    prompt = argv[2] if len(argv) > 2 else "In the beginning"
    n = int(argv[3]) if len(argv) > 3 else 16

    try:
        options = photon.SessionOptions().set_temperature(0.8).set_seed(42)
        with photon.Model(path) as model, photon.Session(model, options) as session:
            session.prefill(prompt)
            print(prompt, end="")

            # 1. A callback receives each token as it is generated; returning False would stop.
            session.generate(n, show)

            # 2. An iterator (a generator) pulls one token at a time.
            for token in session.tokens(n):
                show(token)

            # 3. Save the session, restore the state into a new session and continue there.
            state = session.save()
            with photon.Session.restore(model, state) as restored:
                for token in restored.tokens(n):
                    show(token)
                print()
                print(f"[{restored.position} tokens, {restored.mode.name.lower()}, "
                      f"state {len(state)} bytes]", file=sys.stderr)
    except photon.PhotonError as error:
        print(f"stream: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
