"""Evaluation through the SDK: every number comes from the `photon` CLI or libphoton itself.

    PYTHONPATH=python:. /usr/bin/python3 -m training.evaluate --photon build/bin/photon \
        --corpus out/train/corpus --runs out/train/runs \
        --model photon-a03=out/train/models/photon-a03.photon ... --out out/train/eval.json

For each model:
- test perplexity (HierGen, which scores as teacher forcing): `photon score -m M -f SEGMENT --json`
  on every line of test-segments.txt (each a file without a trailing newline); perplexity =
  exp(sum of NLL / sum of predicted tokens); also over the tokens after the first
  `prompt_tokens` of each segment only;
- for PHOTON with L >= 2: RecGen perplexity of the same tokens after the first `prompt_tokens` (BOS
  included), `photon score ... --mode recgen --prompt-tokens K`: the segment's start is the prompt
  and every later token is consumed as RecGen consumes a generated one; its ratio to HierGen's
  perplexity of the same tokens;
- for PHOTON with L >= 2: greedy agreement of RecGen with HierGen, `photon generate --tokens PROMPT
  -n 64 --ignore-eos --json --mode hiergen|recgen`, the prompts being the first `prompt_tokens`
  tokens (BOS included) of the test segments: the fraction of identical tokens position by position,
  the share of continuations identical throughout, and the mean length of the common prefix;
- decode throughput and KV bytes through libphoton (ctypes, next to the CLI in build/lib): prefill
  of the first prompt, then generation to the full context with EOS ignored;
  tokens/s is the best of `repeats`; KV bytes is photon_session_kv_bytes summed over levels at the
  end;
- the final recursive loss and token losses from the run's log (training.train);
- with --reference NAME (a model given before the others, e.g. the f16 file of the weights that
  the others store as q8): each other model's test perplexity (and RecGen's) over the reference's,
  and its greedy continuations of the same prompts against the reference's, in every mode;
- with --precision NAME=P: that model is loaded at precision P (exact, bf16 or int8), e.g. the same file
  twice, the second at bf16, with the first as the reference.
"""

import argparse
import ctypes
import json
import math
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np


class ModelFile:
    """A model file and the precision it is loaded at (None: the device's default)."""

    def __init__(self, path, precision=None):
        self.path = pathlib.Path(path)
        self.precision = precision

    def cli(self):
        """The CLI flags that load it."""
        return ["-m", str(self.path)] + (["--precision", self.precision] if self.precision else [])

    def __str__(self):
        return str(self.path)


def run_cli(photon, args):
    result = subprocess.run([str(photon), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"evaluate: photon {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def last_json_line(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def segment_logprobs(photon, model, segments, extra_args):
    """`photon score -m M -f SEGMENT --json EXTRA` of every segment: its logprobs (null first)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="photon-eval-") as tmp:
        path = pathlib.Path(tmp) / "segment.txt"
        for text in segments:
            path.write_text(text, encoding="utf-8")
            out.append(last_json_line(run_cli(photon, ["score", *model.cli(), "-f", str(path),
                                                       "--json", *extra_args]))["logprobs"])
    return out


def nll_sum(logprobs, start):
    """(NLL, tokens) of the logprobs from position `start` on (position 0 is never predicted)."""
    values = [v for lp in logprobs for v in lp[max(start, 1):]]
    return -sum(values), len(values)


def test_perplexity(photon, model, segments, prompt_tokens):
    logprobs = segment_logprobs(photon, model, segments, [])  # auto: teacher-forced
    nll, predicted = nll_sum(logprobs, 1)
    nll_after, after = nll_sum(logprobs, prompt_tokens)
    return {"perplexity": math.exp(nll / predicted), "nll_per_token": nll / predicted,
            "tokens_predicted": predicted, "segments": len(segments),
            "perplexity_after_prompt": math.exp(nll_after / after),
            "tokens_after_prompt": after, "prompt_tokens": prompt_tokens}


def recgen_perplexity(photon, model, segments, prompt_tokens, hiergen):
    """RecGen perplexity of the tokens after each segment's first prompt_tokens, and its ratio to
    HierGen's on the same tokens (test_perplexity's perplexity_after_prompt)."""
    logprobs = segment_logprobs(photon, model, segments,
                                ["--mode", "recgen", "--prompt-tokens", str(prompt_tokens)])
    nll, tokens = nll_sum(logprobs, prompt_tokens)
    perplexity = math.exp(nll / tokens)
    return {"perplexity": perplexity, "tokens": tokens, "prompt_tokens": prompt_tokens,
            "ratio_to_hiergen": perplexity / hiergen["perplexity_after_prompt"]}


def generate_tokens(photon, model, prompt, n, mode):
    args = ["generate", *model.cli(), "--tokens", ",".join(map(str, prompt)), "-n", str(n),
            "--mode", mode, "--ignore-eos", "--json"]
    return last_json_line(run_cli(photon, args))["tokens"]


def greedy(photon, model, prompts, n, mode):
    """The greedy continuation of every prompt, n tokens each."""
    out = []
    for prompt in prompts:
        tokens = generate_tokens(photon, model, prompt, n, mode)
        if len(tokens) != n:
            raise SystemExit(f"evaluate: expected {n} tokens, got {len(tokens)}")
        out.append(tokens)
    return out


def agreement_of(first, second, prompts, n):
    """How two sets of continuations of the same prompts agree, position by position."""
    same, identical, prefix = 0, 0, 0
    for a, b in zip(first, second):
        matches = [x == y for x, y in zip(a, b)]
        same += sum(matches)
        identical += all(matches)
        prefix += matches.index(False) if not all(matches) else n
    return {"token_agreement": same / (n * len(prompts)),
            "identical_continuations": identical / len(prompts),
            "mean_common_prefix": prefix / len(prompts), "prompts": len(prompts),
            "prompt_tokens": len(prompts[0]), "continuation_tokens": n}


def agreement(photon, model, prompts, n):
    """RecGen's greedy continuations against HierGen's."""
    return agreement_of(greedy(photon, model, prompts, n, "hiergen"),
                        greedy(photon, model, prompts, n, "recgen"), prompts, n)


def against_reference(photon, model, reference, result, prompts, n, levels):
    """A model beside another file of the same weights (f16 beside q8, say): test perplexity
    ratios, and the greedy continuations of each mode against the reference's."""
    out = {"reference": str(reference["file"]),
           "perplexity_ratio": result["test"]["perplexity"] / reference["test"]["perplexity"]}
    if "recgen" in result:
        out["recgen_perplexity_ratio"] = (result["recgen"]["perplexity"] /
                                          reference["recgen"]["perplexity"])
    for mode in ["hiergen"] + (["recgen"] if levels >= 2 else []):
        out[mode] = agreement_of(greedy(photon, model, prompts, n, mode),
                                 greedy(photon, ModelFile(reference["file"],
                                                          reference.get("precision")),
                                        prompts, n, mode), prompts, n)
    return out


class Library:
    """The few libphoton calls the throughput measurement needs."""

    HIERGEN, RECGEN = 1, 2

    def __init__(self, path):
        lib = ctypes.CDLL(str(path))
        p = ctypes.c_void_p
        lib.photon_last_error.restype = ctypes.c_char_p
        lib.photon_model_load.argtypes = [ctypes.c_char_p, p, ctypes.POINTER(p)]
        lib.photon_load_options_create.argtypes = [ctypes.POINTER(p)]
        lib.photon_load_options_free.argtypes = [p]
        lib.photon_load_options_set_precision.argtypes = [p, ctypes.c_char_p]
        lib.photon_model_free.argtypes = [p]
        lib.photon_model_levels.argtypes = [p]
        lib.photon_model_parameter_count.argtypes = [p]
        lib.photon_model_parameter_count.restype = ctypes.c_uint64
        lib.photon_session_options_create.argtypes = [ctypes.POINTER(p)]
        lib.photon_session_options_free.argtypes = [p]
        lib.photon_session_options_set_mode.argtypes = [p, ctypes.c_int]
        lib.photon_session_options_set_ignore_eos.argtypes = [p, ctypes.c_int]
        lib.photon_session_create.argtypes = [p, p, ctypes.POINTER(p)]
        lib.photon_session_free.argtypes = [p]
        lib.photon_session_prefill.argtypes = [p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t]
        lib.photon_session_generate.argtypes = [p, ctypes.c_int32, p, p,
                                                ctypes.POINTER(ctypes.c_int32)]
        lib.photon_session_kv_bytes.argtypes = [p, ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64),
                                                ctypes.POINTER(ctypes.c_uint64)]
        self.lib = lib

    def check(self, status, what):
        if status != 0:
            raise SystemExit(f"evaluate: {what}: {self.lib.photon_last_error().decode()}")

    def decode(self, model_file, prompt, n, mode, repeats):
        """(best tokens/s, KV bytes at the end) of generating n tokens after prompt."""
        lib, p = self.lib, ctypes.c_void_p
        model, load_options = p(), p()
        self.check(lib.photon_load_options_create(ctypes.byref(load_options)), "load options")
        try:
            if model_file.precision:
                self.check(lib.photon_load_options_set_precision(
                    load_options, model_file.precision.encode()), "precision")
            self.check(lib.photon_model_load(str(model_file).encode(), load_options,
                                             ctypes.byref(model)), f"load {model_file}")
        finally:
            lib.photon_load_options_free(load_options)
        levels = max(1, lib.photon_model_levels(model))
        options = p()
        self.check(lib.photon_session_options_create(ctypes.byref(options)), "options")
        self.check(lib.photon_session_options_set_mode(options, mode), "mode")
        self.check(lib.photon_session_options_set_ignore_eos(options, 1), "ignore_eos")
        ids = (ctypes.c_int32 * len(prompt))(*prompt)
        best, kv = 0.0, 0
        try:
            for _ in range(repeats):
                session = p()
                self.check(lib.photon_session_create(model, options, ctypes.byref(session)),
                           "session")
                try:
                    self.check(lib.photon_session_prefill(session, ids, len(prompt)), "prefill")
                    generated = ctypes.c_int32()
                    start = time.perf_counter()
                    self.check(lib.photon_session_generate(session, n, None, None,
                                                           ctypes.byref(generated)), "generate")
                    seconds = time.perf_counter() - start
                    if generated.value != n:
                        raise SystemExit(f"evaluate: generated {generated.value} of {n} tokens")
                    best = max(best, n / seconds)
                    kv = 0
                    for level in range(1, levels + 1):
                        encoder, window = ctypes.c_uint64(), ctypes.c_uint64()
                        self.check(lib.photon_session_kv_bytes(session, level,
                                                               ctypes.byref(encoder),
                                                               ctypes.byref(window)), "kv_bytes")
                        kv += encoder.value + window.value
                finally:
                    lib.photon_session_free(session)
        finally:
            lib.photon_session_options_free(options)
            lib.photon_model_free(model)
        return {"tokens_per_s": best, "kv_bytes": kv, "prompt_tokens": len(prompt),
                "generated_tokens": n}


def training_summary(run_dir, tail=50):
    """Final losses from the run's log: the last validation pass and the mean of the last `tail`
    training steps."""
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    last = train[-tail:]
    summary = {"steps": train[-1]["step"], "tokens": train[-1]["tokens"],
               "train_seconds": train[-1]["elapsed"],
               "train_token_loss": float(np.mean([r["token_loss"] for r in last])),
               "valid_token_loss": valid[-1]["token_loss"] if valid else None}
    if train[-1]["rec_loss"]:
        summary["train_rec_loss"] = [float(np.mean([r["rec_loss"][i] for r in last]))
                                     for i in range(len(train[-1]["rec_loss"]))]
        summary["valid_rec_loss"] = valid[-1]["rec_loss"] if valid else None
        summary["valid_recgen_loss"] = valid[-1].get("recgen_loss") if valid else None
    run = json.loads((run_dir / "run.json").read_text())
    summary["alpha"] = run["train"]["alpha"]
    summary["parameters"] = run["parameters"]
    return summary


def prompts_from(corpus, segments, prompt_tokens):
    """BOS + the first prompt_tokens - 1 tokens of each test segment (those long enough)."""
    out = subprocess.run(["spm_encode", f"--model={corpus / 'tokenizer.model'}",
                          "--output_format=id"], input="\n".join(segments) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    prompts = []
    for line in out:
        ids = [int(t) for t in line.split()]
        if len(ids) >= prompt_tokens - 1:
            prompts.append([1] + ids[:prompt_tokens - 1])
    return prompts


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photon", default="build/bin/photon", help="the photon CLI")
    parser.add_argument("--lib", help="libphoton.so (default: ../lib/libphoton.so of the CLI)")
    parser.add_argument("--corpus", default="out/train/corpus", type=pathlib.Path)
    parser.add_argument("--runs", default="out/train/runs", type=pathlib.Path,
                        help="training.train run directories, named as the models")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FILE",
                        help="a model to evaluate (repeatable); NAME picks its run directory")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--continuation", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=0, help="at most this many (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--reference", metavar="NAME",
                        help="one of the --model names: every other model is also compared with "
                             "it (perplexity ratios, greedy agreement per mode)")
    parser.add_argument("--precision", action="append", default=[], metavar="NAME=P",
                        help="load model NAME at precision P, exact, bf16 or int8 (repeatable)")
    parser.add_argument("--out", default="out/train/eval.json", type=pathlib.Path)
    args = parser.parse_args(argv)
    precisions = dict(spec.partition("=")[::2] for spec in args.precision)
    names = {spec.partition("=")[0] for spec in args.model}
    for name in precisions:
        if name not in names:
            raise SystemExit(f"evaluate: --precision {name}=...: no --model is named {name}")

    photon = pathlib.Path(args.photon)
    lib = None if args.skip_throughput else Library(
        args.lib or photon.resolve().parent.parent / "lib" / "libphoton.so")
    segments = (args.corpus / "test-segments.txt").read_text(encoding="utf-8").splitlines()
    prompts = prompts_from(args.corpus, segments, args.prompt_tokens)
    if args.prompts:
        prompts = prompts[:args.prompts]
    context = args.prompt_tokens + 224  # decode to a 256-token context
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        model = ModelFile(path, precisions.get(name))
        print(f"evaluate: {name} ({model})", file=sys.stderr)
        info = json.loads(run_cli(photon, ["inspect", str(model), "--json"]))
        config = info.get("config", {})
        levels = len(config.get("levels", [])) if config.get("arch") == "photon" else 0
        result = {"file": str(model), "precision": model.precision or "exact",
                  "arch": config.get("arch"), "levels": levels,
                  "parameters": info.get("parameters"),
                  "test": test_perplexity(photon, model, segments, args.prompt_tokens)}
        run_dir = args.runs / name
        if (run_dir / "log.jsonl").exists():
            result["training"] = training_summary(run_dir)
        if levels >= 2:
            result["recgen"] = recgen_perplexity(photon, model, segments, args.prompt_tokens,
                                                 result["test"])
            result["agreement"] = agreement(photon, model, prompts, args.continuation)
        if lib is not None:
            modes = {"hiergen": Library.HIERGEN}
            if levels >= 2:
                modes["recgen"] = Library.RECGEN
            result["decode"] = {mode: lib.decode(model, prompts[0], context - len(prompts[0]),
                                                 value, args.repeats)
                                for mode, value in modes.items()}
        if args.reference and name != args.reference:
            if args.reference not in results:
                raise SystemExit(f"evaluate: --reference {args.reference} must come first")
            result["vs_reference"] = against_reference(
                photon, model, results[args.reference], result, prompts, args.continuation, levels)
        results[name] = result
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps({name: result}), file=sys.stderr)


if __name__ == "__main__":
    main()
