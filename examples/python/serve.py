#!/usr/bin/env python3
"""serve -- serve three completions of one prompt at once with a PHOTON engine: two streamed into
asyncio (each request's iterator waits in an executor thread, with the interpreter lock released),
one through a callback on the engine's own thread.

    PYTHONPATH=build/bindings/python python3 examples/python/serve.py [MODEL] [PROMPT] [N]

MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
"In the beginning", N (tokens per request) to 32.
"""
import asyncio
import sys

import photon


async def stream(request, show):
    """Passes a request's pieces to show as the engine delivers them."""
    loop = asyncio.get_running_loop()
    tokens = request.tokens()
    while (token := await loop.run_in_executor(None, next, tokens, None)) is not None:
        show(token.piece)


async def serve(engine, prompt, n):
    def sampler(seed):
        return photon.SessionOptions().set_temperature(0.8).set_seed(seed)

    first = engine.submit(prompt, options=sampler(1), max_tokens=n)
    second = engine.submit(prompt, options=sampler(2), max_tokens=n)
    third_pieces = []
    third = engine.submit(prompt, options=sampler(3), max_tokens=n,
                          on_token=lambda token: third_pieces.append(token.piece))
    print(prompt, end="")
    second_pieces = []
    await asyncio.gather(stream(first, lambda piece: print(piece, end="", flush=True)),
                         stream(second, second_pieces.append))
    await asyncio.get_running_loop().run_in_executor(None, third.wait)
    print()
    for pieces in (second_pieces, third_pieces):
        print(prompt + "".join(pieces))
    return [first, second, third]


def main(argv):
    path = argv[1] if len(argv) > 1 else "models/photon-kjv.photon"
    prompt = argv[2] if len(argv) > 2 else "In the beginning"
    n = int(argv[3]) if len(argv) > 3 else 32

    try:
        with photon.Model(path) as model, photon.Engine(model, max_running=4) as engine:
            engine.start()  # its worker thread runs the steps
            requests = asyncio.run(serve(engine, prompt, n))
            engine.stop()
            stats = engine.stats()
            for request in requests:
                request.close()
            print(f"[{len(requests)} requests, {stats.generated_tokens} tokens, "
                  f"{stats.steps} steps]", file=sys.stderr)
    except photon.PhotonError as error:
        print(f"serve: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
