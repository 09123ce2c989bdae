"""Command line of the reference; prints one JSON object.

    PYTHONPATH=python /usr/bin/python3 -m photon_ref score --config C --weights W --tokens 1,5,9
        [--mode hiergen|recgen --prompt-tokens K]
    PYTHONPATH=python /usr/bin/python3 -m photon_ref generate --config C --weights W
        --tokens 1,5 --mode hiergen|recgen -n 16
"""

import argparse
import json
import sys

from .generate import generate_hiergen, generate_recgen
from .model import load_model, score
from .recgen import score_recgen


def parse_tokens(text):
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tokens must be comma-separated integers, got {text!r}")
    if not tokens:
        raise argparse.ArgumentTypeError("--tokens must hold at least one id")
    return tokens


def main(argv=None):
    parser = argparse.ArgumentParser(prog="photon_ref", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("score", "generate"):
        sub = commands.add_parser(name)
        sub.add_argument("--config", required=True, help="config.json (spec section 8)")
        sub.add_argument("--weights", required=True, help="weights.npz (spec section 8)")
        sub.add_argument("--tokens", required=True, type=parse_tokens, help="ids, e.g. 1,5,9")
        sub.add_argument("--mode", choices=["hiergen", "recgen"], default="hiergen")
        if name == "score":
            sub.add_argument("--prompt-tokens", type=int, default=1, metavar="K",
                             help="recgen: the first K tokens are the prompt (teacher-forced), "
                                  "later ones are consumed as RecGen consumes generated tokens")
        else:
            sub.add_argument("-n", type=int, required=True, help="tokens to generate (greedy)")
    args = parser.parse_args(argv)

    model = load_model(args.config, args.weights)
    vocab = model.config.vocab_size
    bad = [t for t in args.tokens if not 0 <= t < vocab]
    if bad:
        parser.error(f"--tokens: ids {bad} are outside [0, {vocab})")
    try:
        if args.command == "score" and args.mode == "recgen":
            result = {"logprobs": score_recgen(model, args.tokens, args.prompt_tokens)}
        elif args.command == "score":
            result = {"logprobs": score(model, args.tokens)}
        else:
            generate = generate_recgen if args.mode == "recgen" else generate_hiergen
            out = generate(model, args.tokens, args.n)
            result = {"tokens": out["tokens"], "logprobs": out["logprobs"]}
    except ValueError as e:  # RecGen on a model it is not defined for, a prompt of 0 tokens
        parser.error(str(e))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
