#!/usr/bin/env python3
"""End-to-end tests of the photon command line tool on small random models.

usage: test_cli.py --photon BIN --work-dir DIR GROUP

GROUP is `setup` (writes the models the other groups use) or one of usage, errors, inspect,
convert, tokenizer, score, windows, generate, interrupt, resume, bench, device. Standard library only. Prints "N passed,
N failed" and exits non-zero when a check failed.
"""

import argparse
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import zipfile

PHOTON = ""
WORK = ""
PASSED = 0
FAILED = 0

# Spec section 9: the paper's models and their exact parameter counts.
PAPER_PRESETS = {
    "photon-600m": 646400768, "photon-900m": 907164160, "photon-1.2b": 1229533440,
    "block-600m": 629772416, "block-900m": 887880448, "block-1.2b": 1207397760,
    "vanilla-600m": 610915968, "vanilla-900m": 867114752, "vanilla-1.2b": 1184657280,
}
PHOTON_MODULES = ["tok_emb_enc", "enc.1", "enc.2", "dec.2", "dec.1", "tok_emb_dec", "lm_head"]
VANILLA_MODULES = ["tok_emb", "layers", "norm", "lm_head"]
COMMANDS = ["convert", "init", "inspect", "score", "generate", "bench"]


def check(condition, message):
    global PASSED, FAILED
    if condition:
        PASSED += 1
    else:
        FAILED += 1
        print("FAIL: " + message, file=sys.stderr)
    return condition


class Result:
    def __init__(self, argv, returncode, stdout, stderr):
        self.argv, self.rc, self.out, self.err = argv, returncode, stdout, stderr

    def describe(self):
        return "photon %s -> %d\nstdout: %s\nstderr: %s" % (
            " ".join(self.argv), self.rc, self.out[-2000:], self.err[-2000:])


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "PHOTON_MODEL"}
    env.update(extra)
    return env


def photon(*argv, env=None, stdin=None, timeout=600):
    argv = [str(a) for a in argv]
    proc = subprocess.run([PHOTON] + argv, capture_output=True, input=stdin, timeout=timeout,
                          env=env if env is not None else clean_env())
    decode = lambda data: data.decode("utf-8", "surrogateescape")
    return Result(argv, proc.returncode, decode(proc.stdout), decode(proc.stderr))


def expect_ok(result):
    return check(result.rc == 0, "expected success\n" + result.describe())


def expect_failure(result, code, command, fragment=None):
    """Exit code `code` (never a signal), one line on stderr starting 'photon <command>:'."""
    prefix = "photon %s:" % command if command else "photon:"
    lines = result.err.strip().split("\n")
    ok = check(result.rc == code, "expected exit code %d\n%s" % (code, result.describe()))
    ok &= check(0 <= result.rc < 128, "killed by a signal\n" + result.describe())
    ok &= check(len(lines) == 1 and lines[0].startswith(prefix),
                "expected one line starting '%s'\n%s" % (prefix, result.describe()))
    if fragment is not None:
        ok &= check(fragment in result.err, "expected '%s' in stderr\n%s" % (fragment,
                                                                             result.describe()))
    return ok


def model(name):
    return os.path.join(WORK, name + ".photon")


def inspect_json(path):
    result = photon("inspect", path, "--json")
    if not expect_ok(result):
        return None
    return json.loads(result.out)


def split_generate(result):
    """stdout of generate --json: the streamed text, a newline, one JSON line."""
    lines = result.out.split("\n")
    if not check(len(lines) >= 3 and lines[-1] == "", "no final JSON line\n" + result.describe()):
        return "", {}
    return "\n".join(lines[:-2]), json.loads(lines[-2])


def generate(*argv, path=None):
    result = photon("generate", "-m", path or model("photon-small"), "--json", *argv)
    if not expect_ok(result):
        return "", {}
    return split_generate(result)


def preset_counts():
    result = photon("init", "--list-presets")
    expect_ok(result)
    counts = {}
    for line in result.out.strip().split("\n"):
        fields = line.split()
        counts[fields[0]] = int(fields[1])
    return counts


# ---------------------------------------------------------------------------------------------
# Groups


def group_setup():
    os.makedirs(WORK, exist_ok=True)
    for preset in ["photon-small", "vanilla-small"]:
        result = photon("init", "--preset", preset, "--seed", 1, "-o", model(preset))
        expect_ok(result)
        check(os.path.getsize(model(preset)) > 0, preset + " was not written")


def group_usage():
    result = photon()
    check(result.rc == 2 and "usage: photon" in result.err, "no arguments\n" + result.describe())
    result = photon("--version")
    match = re.match(r"photon (\d+\.\d+\.\d+) \(library (\d+\.\d+\.\d+)\)\n$", result.out)
    check(result.rc == 0 and match and match.group(1) == match.group(2),
          "--version\n" + result.describe())
    overview = photon("help")
    expect_ok(overview)
    for command in COMMANDS:
        check(re.search(r"^  %s " % command, overview.out, re.M) is not None,
              "help lists " + command)
        text = photon("help", command)
        expect_ok(text)
        check(text.out.startswith("usage: photon " + command), "help " + command)
        for flag in ["--help", "-h"]:
            again = photon(command, flag)
            check(again.rc == 0 and again.out == text.out, command + " " + flag)
    expect_failure(photon("help", "frobnicate"), 2, "help", "frobnicate")
    expect_failure(photon("frobnicate"), 2, None, "unknown command 'frobnicate'")
    expect_failure(photon("--frobnicate"), 2, None, "unknown option")


def group_errors():
    m = model("photon-small")
    missing = os.path.join(WORK, "no-such-model.photon")
    not_a_model = os.path.join(WORK, "not-a-model.photon")
    with open(not_a_model, "w") as f:
        f.write("this is not a model file\n" * 8)

    # Usage errors: exit code 2.
    for command in COMMANDS:
        expect_failure(photon(command, "--frobnicate"), 2, command, "--frobnicate")
    expect_failure(photon("generate", "-m", m, "--tokens", "1,2", "-n"), 2, "generate", "-n")
    expect_failure(photon("generate", "-m", m, "--tokens"), 2, "generate", "--tokens")
    expect_failure(photon("generate", "-m", m), 2, "generate", "-p")
    expect_failure(photon("generate", "-m", m, "-p", "a", "--tokens", "1"), 2, "generate")
    expect_failure(photon("generate", "-m", m, "--json=1", "--tokens", "1"), 2, "generate")
    expect_failure(photon("generate", "-m", m, "--tokens", "1", "extra"), 2, "generate", "extra")
    bad_values = [
        ("-n", "abc"), ("-n", "-3"), ("-n", "1.5"), ("--temperature", "warm"),
        ("--temperature", "-1"), ("--temperature", "nan"), ("--top-p", "0"), ("--top-p", "1.5"),
        ("--min-p", "1"), ("--repeat-penalty", "0.5"), ("--repeat-last-n", "x"),
        ("--mode", "fast"), ("--seed", "-1"), ("--seed", "seven"), ("--ctx", "0"),
        ("--ctx", "abc"), ("--ctx", "99999999"), ("--stop", ""), ("--top-k", "1e3"),
        ("--kv-type", "f8"), ("--kv-type", "BF16"), ("--presence-penalty", "inf"),
        ("--frequency-penalty", "x"), ("--logit-bias", "5"), ("--logit-bias", "x=1"),
        ("--logit-bias", "5=nan"), ("--logit-bias", "-1=2"),
    ]
    for flag, value in bad_values:
        expect_failure(photon("generate", "-m", m, "--tokens", "1,2", flag, value), 2, "generate",
                       flag)
    for tokens in ["1,x,3", "1.5", "", "1,,2", "1,", "99999999999", "0x10"]:
        expect_failure(photon("generate", "-m", m, "--tokens", tokens), 2, "generate", "--tokens")
        expect_failure(photon("score", "-m", m, "--tokens", tokens), 2, "score", "--tokens")
    expect_failure(photon("score", "-m", m), 2, "score")
    expect_failure(photon("score", "-m", m, "--tokens", "1", "-f", not_a_model), 2, "score")
    expect_failure(photon("score", "--tokens", "1,2"), 2, "score", "PHOTON_MODEL")
    expect_failure(photon("generate", "--tokens", "1,2"), 2, "generate", "PHOTON_MODEL")
    expect_failure(photon("inspect"), 2, "inspect", "PHOTON_MODEL")
    expect_failure(photon("inspect", m, m), 2, "inspect")
    expect_failure(photon("init", "-o", os.path.join(WORK, "x.photon")), 2, "init")
    expect_failure(photon("init", "--preset", "photon-small"), 2, "init", "--output")
    expect_failure(photon("init", "--preset", "photon-small", "--config", "c.json", "-o", "x"), 2,
                   "init")
    expect_failure(photon("init", "--preset", "no-such-preset", "-o", "x"), 2, "init",
                   "no-such-preset")
    expect_failure(photon("init", "--preset", "photon-small", "--dtype", "f64", "-o", "x"), 2,
                   "init", "f64")
    expect_failure(photon("convert", "--config", "c.json", "-o", "x"), 2, "convert", "--weights")

    # Runtime failures: exit code 1, the library's message included.
    expect_failure(photon("inspect", missing), 1, "inspect", missing)
    expect_failure(photon("inspect", not_a_model), 1, "inspect", not_a_model)
    expect_failure(photon("score", "-m", missing, "--tokens", "1,2"), 1, "score", missing)
    expect_failure(photon("generate", "-m", missing, "-p", "hi"), 1, "generate", missing)
    expect_failure(photon("score", "-m", m, "-f", os.path.join(WORK, "no-such.txt")), 1, "score",
                   "no-such.txt")
    # A directory reads as nothing: it must not pass for an empty text or configuration.
    expect_failure(photon("score", "-m", m, "-f", WORK), 1, "score",
                   f"'{WORK}': it is a directory")
    expect_failure(photon("init", "--config", WORK, "-o", os.path.join(WORK, "x.photon")), 1,
                   "init", f"'{WORK}': it is a directory")
    for tokens in ["1,99999", "1,-5", "4096"]:
        expect_failure(photon("score", "-m", m, "--tokens", tokens), 1, "score", "BAD_TOKEN")
        expect_failure(photon("generate", "-m", m, "--tokens", tokens), 1, "generate",
                       "BAD_TOKEN")
    expect_failure(photon("generate", "-m", m, "--tokens", "1,2,3,4,5,6", "--ctx", "4"), 1,
                   "generate", "context")
    context = inspect_json(m)["context_length"]
    too_long = ",".join(["5"] * (context + 1))
    expect_failure(photon("score", "-m", m, "--tokens", too_long, "--stride", context), 2,
                   "score", "--stride")
    expect_failure(photon("score", "-m", m, "--tokens", "1,2", "--stride", 0), 2, "score",
                   "--stride")
    expect_failure(photon("score", "-m", m, "--tokens", "1,2", "--top-logprobs", 2, "--mode",
                          "recgen"), 2, "score", "teacher-forced")
    expect_failure(photon("score", "-m", m, "--tokens", "1,2", "--top-logprobs", 100000), 2,
                   "score", "vocabulary")
    expect_failure(photon("generate", "-m", m, "--tokens", too_long), 1, "generate", "context")
    expect_failure(photon("generate", "-m", model("vanilla-small"), "--mode", "recgen", "-p", "a"),
                   1, "generate", "UNSUPPORTED")
    expect_failure(photon("init", "--config", os.path.join(WORK, "no-such.json"), "-o", "x"), 1,
                   "init", "no-such.json")
    bad_config = os.path.join(WORK, "bad-config.json")
    with open(bad_config, "w") as f:
        f.write('{"arch": "photon", "vocab_size": 0}')
    expect_failure(photon("init", "--config", bad_config, "-o", os.path.join(WORK, "x.photon")),
                   1, "init", "BAD_CONFIG")
    expect_failure(photon("init", "--preset", "photon-small", "-o", "/no-such-dir/x.photon"), 1,
                   "init", "/no-such-dir/x.photon")
    expect_failure(photon("convert", "--config", os.path.join(WORK, "no-such.json"), "--weights",
                          os.path.join(WORK, "no-such.npz"), "-o", os.path.join(WORK, "y.photon")),
                   1, "convert")


def check_layout(info, path, bytes_per_value):
    tensors = info["file"]["tensors"]
    size = os.path.getsize(path)
    check(info["file"]["size"] == size, "file.size is the file's size")
    data_offset = info["file"]["data_offset"]
    check(0 < data_offset < size, "data_offset inside the file")
    total = 0
    for tensor in tensors:
        elements = math.prod(tensor["shape"])
        total += elements
        check(tensor["bytes"] == elements * bytes_per_value,
              "%s: %d bytes for %d values" % (tensor["name"], tensor["bytes"], elements))
        check(tensor["offset"] >= data_offset and tensor["offset"] + tensor["bytes"] <= size,
              tensor["name"] + " lies inside the data section")
    check(total == info["parameters"], "tensor elements add up to the parameter count")
    check(sum(info["modules"].values()) == info["parameters"], "modules add up to the total")


def group_inspect():
    counts = preset_counts()
    for name, parameters in PAPER_PRESETS.items():
        check(counts.get(name) == parameters,
              "%s: --list-presets says %s, spec %d" % (name, counts.get(name), parameters))
    for name in ["photon-small", "block-small", "vanilla-small"]:
        check(name in counts, name + " is a preset")

    path = model("photon-small")
    info = inspect_json(path)
    for key in ["arch", "config", "parameters", "modules", "file", "metadata"]:
        check(key in info, "inspect --json has '%s'" % key)
    check(info["arch"] == "photon" and info["levels"] == 2, "photon-small is a 2-level PHOTON")
    check(info["parameters"] == counts["photon-small"],
          "inspect parameters %d == --list-presets %d" % (info["parameters"],
                                                          counts["photon-small"]))
    check(isinstance(info["config"], dict) and len(info["config"]["levels"]) == 2, "config")
    check(sorted(info["modules"]) == sorted(PHOTON_MODULES), "modules %s" % list(info["modules"]))
    names = [t["name"] for t in info["file"]["tensors"]]
    check("dec.2.start" in names, "the start vector is a tensor")
    check(all(t["dtype"] == "f32" for t in info["file"]["tensors"]), "f32 by default")
    check(info["metadata"].get("preset") == "photon-small" and info["metadata"].get("seed") == "1",
          "init records the preset and the seed: %s" % info["metadata"])
    check_layout(info, path, 4)

    vanilla = inspect_json(model("vanilla-small"))
    check(vanilla["arch"] == "vanilla" and vanilla["parameters"] == counts["vanilla-small"],
          "vanilla parameters")
    check(sorted(vanilla["modules"]) == sorted(VANILLA_MODULES),
          "vanilla modules %s" % list(vanilla["modules"]))
    check_layout(vanilla, model("vanilla-small"), 4)

    human = photon("inspect", path)
    expect_ok(human)
    for fragment in ["photon, 2 levels", "parameters", "enc.1", "dec.2.start", "data section"]:
        check(fragment in human.out, "human inspect shows '%s'" % fragment)
    check(photon("inspect", "-m", path, "--json").out == photon("inspect", path, "--json").out,
          "-m and the argument agree")
    from_env = photon("inspect", "--json", env=clean_env(PHOTON_MODEL=path))
    check(from_env.rc == 0 and json.loads(from_env.out)["parameters"] == info["parameters"],
          "PHOTON_MODEL names the default model")

    bf16 = os.path.join(WORK, "block-small-bf16.photon")
    expect_ok(photon("init", "--preset", "block-small", "--dtype", "bf16", "-o", bf16))
    info = inspect_json(bf16)
    check(info["levels"] == 1 and info["parameters"] == counts["block-small"], "block-small")
    check(all(t["dtype"] == "bf16" for t in info["file"]["tensors"]), "--dtype bf16 is stored")
    check_layout(info, bf16, 2)
    os.remove(bf16)

    # A model file stored again in q8: matrices in q8, vectors in f32, about half of bf16's bytes.
    q8 = os.path.join(WORK, "vanilla-small-q8.photon")
    expect_ok(photon("convert", "--from", model("vanilla-small"), "--dtype", "q8", "-o", q8))
    info = inspect_json(q8)
    types = {t["name"]: t["dtype"] for t in info["file"]["tensors"]}
    check(types["lm_head"] == "q8" and types["layers.0.attn.wq"] == "q8" and
          types["norm"] == "f32", "--dtype q8 stores matrices in q8, vectors in f32: %s" % types)
    check(os.path.getsize(q8) < 0.3 * os.path.getsize(model("vanilla-small")),
          "q8 takes about a quarter of f32's bytes")
    expect_ok(photon("score", "-m", q8, "--tokens", "1,5,9,13"))
    expect_failure(photon("convert", "--from", model("vanilla-small"), "--config", "c.json",
                          "-o", q8), 1, "convert", "is a model file")
    expect_failure(photon("generate", "-m", q8, "-p", "In", "--kv-type", "q8"), 2, "generate",
                   "'q8' is not one of f32, f16, bf16")
    os.remove(q8)


TINY_CONFIG = {
    "arch": "photon", "vocab_size": 4096, "embed_dim": 8, "token_dim": 16, "norm_eps": 1e-5,
    "rope_theta": 10000.0, "max_seq_len": 256,
    "levels": [
        {"chunk_len": 2, "chunker": "concat", "dim": 16, "prefix_len": 1,
         "encoder": {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 4, "ffn_dim": 24},
         "decoder": {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 4, "ffn_dim": 24}},
        {"chunk_len": 2, "chunker": "linear", "dim": 24, "prefix_len": 2,
         "encoder": {"layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 6, "ffn_dim": 32},
         "decoder": {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 4, "ffn_dim": 32}}],
}


def npy_bytes(raw, shape, descr="<f4", fortran=False):
    """A little-endian .npy file holding `raw` (the values' bytes, in the order `fortran` says)."""
    dims = "(%s)" % ("".join("%d," % d for d in shape) if len(shape) == 1
                     else ", ".join(str(d) for d in shape))
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, dims)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + raw


def write_npz(path, arrays, descr="<f4", fortran=()):
    """arrays: name -> (row-major bytes, shape); the arrays named in `fortran` are stored
    column-major, as numpy.asfortranarray saves them."""
    size = int(descr[2:])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, (raw, shape) in arrays.items():
            if name in fortran and len(shape) == 2:
                rows, cols = shape
                raw = b"".join(raw[(r * cols + c) * size:(r * cols + c + 1) * size]
                               for c in range(cols) for r in range(rows))
            archive.writestr(name + ".npy", npy_bytes(raw, shape, descr, name in fortran))


def model_arrays(path):
    """A model file's tensors as they are stored: name -> (bytes, shape), and their dtypes."""
    info = inspect_json(path)
    arrays, dtypes = {}, set()
    with open(path, "rb") as f:
        for tensor in info["file"]["tensors"]:
            f.seek(tensor["offset"])
            arrays[tensor["name"]] = (f.read(tensor["bytes"]), tensor["shape"])
            dtypes.add(tensor["dtype"])
    return arrays, dtypes


def patch_float(path, info, tensor_name, element, value):
    """Overwrites one f32 element of a model file's tensor in place."""
    tensor = next(t for t in info["file"]["tensors"] if t["name"] == tensor_name)
    with open(path, "r+b") as f:
        f.seek(tensor["offset"] + 4 * element)
        f.write(struct.pack("<f", value))


def score(path, tokens):
    result = photon("score", "-m", path, "--tokens", ",".join(map(str, tokens)), "--json")
    if not expect_ok(result):
        return None
    return json.loads(result.out)


def group_convert():
    config = os.path.join(WORK, "tiny.json")
    with open(config, "w") as f:
        json.dump(TINY_CONFIG, f)
    source = os.path.join(WORK, "tiny-init.photon")
    expect_ok(photon("init", "--config", config, "--seed", 5, "-o", source))
    info = inspect_json(source)
    if info is None:
        return
    # The init'ed model's weights, read from the file at the offsets inspect reports.
    arrays = {}
    with open(source, "rb") as f:
        for tensor in info["file"]["tensors"]:
            f.seek(tensor["offset"])
            arrays[tensor["name"]] = (f.read(tensor["bytes"]), tensor["shape"])
    weights = os.path.join(WORK, "tiny.npz")
    write_npz(weights, arrays)

    converted = os.path.join(WORK, "tiny-converted.photon")
    expect_ok(photon("convert", "--config", config, "--weights", weights, "-o", converted))
    again = inspect_json(converted)
    if again is None:
        return
    check(again["parameters"] == info["parameters"], "convert keeps the parameter count")
    check([(t["name"], t["shape"]) for t in again["file"]["tensors"]] ==
          [(t["name"], t["shape"]) for t in info["file"]["tensors"]], "convert keeps the tensors")
    tokens = [again["bos"], 17, 300, 5, 4000, 42, 42, 7, 1000]
    original, round_trip = score(source, tokens), score(converted, tokens)
    check(original is not None and original == round_trip,
          "the converted model scores exactly as the original")

    half = os.path.join(WORK, "tiny-f16.photon")
    expect_ok(photon("convert", "--config", config, "--weights", weights, "--dtype", "f16",
                     "--meta", "recgen_agreement=0.61", "--meta", "note=a=b", "-o", half))
    half_info = inspect_json(half)
    if half_info is not None:
        check(half_info["metadata"].get("recgen_agreement") == "0.61" and
              half_info["metadata"].get("note") == "a=b", "--meta entries are in the file")
        check(all(t["dtype"] == "f16" for t in half_info["file"]["tensors"]), "f16 stored")
        check_layout(half_info, half, 2)
        half_scores = score(half, tokens)
        check(half_scores is not None and original is not None
              and len(half_scores["logprobs"]) == len(original["logprobs"]) == len(tokens)
              and all(abs(a - b) < 0.05 for a, b in zip(half_scores["logprobs"][1:],
                                                        original["logprobs"][1:])),
              "the f16 model scores close to the f32 one")

    incomplete = dict(arrays)
    del incomplete["enc.2.chunker.proj.bias"]
    write_npz(weights, incomplete)
    bad = os.path.join(WORK, "tiny-bad.photon")
    expect_failure(photon("convert", "--config", config, "--weights", weights, "-o", bad), 1,
                   "convert", "enc.2.chunker.proj.bias")
    check(not os.path.exists(bad), "a failed convert leaves no file")

    # Arrays saved in Fortran (column-major) order are reordered, not refused.
    matrices = [name for name, (_, shape) in arrays.items() if len(shape) == 2]
    write_npz(weights, arrays, fortran=matrices)
    columns = os.path.join(WORK, "tiny-fortran.photon")
    expect_ok(photon("convert", "--config", config, "--weights", weights, "-o", columns))
    check(score(columns, tokens) == original,
          "a model converted from Fortran-order arrays scores as the original")

    # Non-finite weights, and weights that overflow the storage type, are refused by name.
    nan_head = dict(arrays)
    raw, shape = arrays["lm_head"]
    nan_head["lm_head"] = (raw[:4 * 21] + struct.pack("<f", float("nan")) + raw[4 * 22:], shape)
    write_npz(weights, nan_head)
    expect_failure(photon("convert", "--config", config, "--weights", weights, "-o", bad), 1,
                   "convert", "tensor 'lm_head' holds nan at [%d, %d] (element 21)"
                   % (21 // shape[1], 21 % shape[1]))
    big = dict(arrays)
    raw, shape = arrays["tok_emb_enc"]
    big["tok_emb_enc"] = (struct.pack("<f", 1e6) + raw[4:], shape)
    write_npz(weights, big)
    failed = photon("convert", "--config", config, "--weights", weights, "--dtype", "f16",
                    "-o", bad)
    expect_failure(failed, 1, "convert", "PHOTON_ERR_NOT_FINITE")
    check("'tok_emb_enc' holds 1e+06 at [0, 0]" in failed.err and "overflows f16" in failed.err,
          "the overflow names the tensor, the element and the type: " + failed.err)
    check(not os.path.exists(bad), "a refused convert leaves no file")
    expect_ok(photon("convert", "--config", config, "--weights", weights, "--dtype", "bf16",
                     "-o", bad))
    os.remove(bad)

    # A file made by other means: --verify reads every weight; the engine refuses a NaN logit.
    hand_made = os.path.join(WORK, "tiny-nan.photon")
    with open(converted, "rb") as f, open(hand_made, "wb") as g:
        g.write(f.read())
    patch_float(hand_made, again, "lm_head", 5, float("nan"))
    expect_ok(photon("inspect", hand_made))
    expect_failure(photon("inspect", hand_made, "--verify"), 1, "inspect",
                   "tensor 'lm_head' holds nan at [0, 5] (element 5)")
    verified = photon("inspect", converted, "--verify", "--json")
    check(verified.rc == 0 and json.loads(verified.out).get("verified") is True,
          "--verify passes a converted model\n" + verified.describe())
    human = photon("inspect", converted, "--verify")
    check(human.rc == 0 and "verified" in human.out, "--verify says so\n" + human.describe())
    # Every logit depends on every row of lm_head through the softmax: any position fails.
    for mode in ("hiergen", "recgen"):
        expect_failure(photon("generate", "-m", hand_made, "--tokens", "1,2,3", "-n", 4,
                              "--mode", mode, "--json"), 1, "generate", "PHOTON_ERR_NOT_FINITE")
    expect_failure(photon("score", "-m", hand_made, "--tokens", "1,2,3"), 1, "score",
                   "PHOTON_ERR_NOT_FINITE")
    patch_float(hand_made, again, "lm_head", 5, 0.0)
    expect_failure(photon("inspect", hand_made, "--verify"), 1, "inspect", "PHOTON_ERR_CORRUPT")

    extra = dict(arrays)
    extra["surplus"] = (b"\0" * 16, [4])
    write_npz(weights, extra)
    expect_failure(photon("convert", "--config", config, "--weights", weights, "-o", bad), 1,
                   "convert", "surplus")
    for entry in ("no-equals-sign", "=value"):
        expect_failure(photon("convert", "--config", config, "--weights", weights, "--meta",
                              entry, "-o", bad), 2, "convert", "--meta")
    expect_failure(photon("convert", "--config", config, "--weights", weights, "--tokenizer",
                          os.path.join(WORK, "no-such.model"), "-o", bad), 1, "convert")
    for path in [source, converted, half, weights, columns, hand_made]:
        os.remove(path)


SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(SOURCE, "models", "photon-kjv.photon")
SHIPPED_TOKENIZER = os.path.join(SOURCE, "models", "tokenizer.model")


def group_tokenizer():
    """The shipped model's tokenizer: extracted, it equals models/tokenizer.model, and converting
    the shipped weights with it gives a model that scores exactly as the shipped one; without it
    the ids change, and replacing the model file says so."""
    extracted = os.path.join(WORK, "kjv-tokenizer.model")
    result = photon("inspect", SHIPPED, "--extract-tokenizer", extracted)
    expect_ok(result)
    check(result.out == "" and extracted in result.err, "one line on stderr\n" + result.describe())
    with open(extracted, "rb") as f, open(SHIPPED_TOKENIZER, "rb") as g:
        check(f.read() == g.read(), "models/tokenizer.model is the shipped model's tokenizer")
    expect_failure(photon("inspect", SHIPPED, "--extract-tokenizer",
                          os.path.join(WORK, "no-such-dir", "t.model")), 1, "inspect",
                   "no-such-dir")

    # The shipped weights as an npz (f16, as stored) with the configuration.
    info = inspect_json(SHIPPED)
    arrays, dtypes = model_arrays(SHIPPED)
    check(dtypes == {"f16"}, "the shipped model is f16: %s" % dtypes)
    weights = os.path.join(WORK, "kjv.npz")
    write_npz(weights, arrays, descr="<f2")
    config = os.path.join(WORK, "kjv.json")
    with open(config, "w") as f:
        json.dump(info["config"], f)
    text = os.path.join(WORK, "kjv.txt")
    with open(text, "w") as f:
        f.write("In the beginning God created the heaven and the earth. And the earth was "
                "without form, and void; and darkness was upon the face of the deep.\n")
    shipped = json.loads(photon("score", "-m", SHIPPED, "-f", text, "--json").out)

    copy = os.path.join(WORK, "kjv.photon")
    expect_ok(photon("convert", "--config", config, "--weights", weights, "--dtype", "f16",
                     "--tokenizer", extracted, "-o", copy))
    again = json.loads(photon("score", "-m", copy, "-f", text, "--json").out)
    check(again["tokens"] == shipped["tokens"] and again["logprobs"] == shipped["logprobs"],
          "re-converted with the extracted tokenizer, the shipped weights score as shipped "
          "(perplexity %s, shipped %s)" % (again["perplexity"], shipped["perplexity"]))

    # The built-in tokenizer gives other ids: the replaced file's tokenizer differed, so a
    # warning says so (the conversion itself succeeds: the ids are the caller's business).
    replaced = photon("convert", "--config", config, "--weights", weights, "--dtype", "f16",
                      "-o", copy)
    expect_ok(replaced)
    check("warning" in replaced.err and "another tokenizer" in replaced.err,
          "replacing a model made with another tokenizer warns\n" + replaced.describe())
    wrong = json.loads(photon("score", "-m", copy, "-f", text, "--json").out)
    check(wrong["tokens"] != shipped["tokens"], "the built-in tokenizer's ids differ")
    same = photon("convert", "--config", config, "--weights", weights, "--dtype", "f16",
                  "-o", copy)
    check(same.rc == 0 and "warning" not in same.err,
          "replacing a model made with the same tokenizer does not warn\n" + same.describe())
    for path in [extracted, weights, copy]:
        os.remove(path)


def group_score():
    m = model("photon-small")
    info = inspect_json(m)
    tokens = [info["bos"], 100, 200, 300, 400, 5, 6]
    scored = score(m, tokens)
    check(scored["tokens"] == tokens, "score keeps --tokens exactly")
    check(len(scored["logprobs"]) == len(tokens) and scored["logprobs"][0] is None,
          "one logprob per token, null first")
    check(all(isinstance(x, float) and x <= 0 for x in scored["logprobs"][1:]), "logprobs <= 0")
    nll = -sum(scored["logprobs"][1:])
    check(abs(scored["nll"] - nll) < 1e-3 * max(1.0, nll), "nll = -sum(logprobs)")
    check(abs(scored["perplexity"] - math.exp(nll / (len(tokens) - 1))) <
          1e-3 * scored["perplexity"], "perplexity = exp(nll / (T - 1))")
    single = score(m, [info["bos"]])
    check(single["logprobs"] == [None] and single["nll"] == 0 and single["perplexity"] is None,
          "a single token has nothing to predict")

    text_file = os.path.join(WORK, "text.txt")
    with open(text_file, "w") as f:
        f.write("The quick brown fox jumps over the lazy dog.\n")
    from_file = photon("score", "-m", m, "-f", text_file, "--json")
    expect_ok(from_file)
    from_file = json.loads(from_file.out)
    check(from_file["tokens"][0] == info["bos"] and len(from_file["tokens"]) > 3,
          "text gets BOS first")
    from_stdin = photon("score", "-m", m, "-f", "-", "--json",
                        stdin=b"The quick brown fox jumps over the lazy dog.\n")
    check(from_stdin.rc == 0 and json.loads(from_stdin.out) == from_file, "-f - reads stdin")

    table = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)))
    expect_ok(table)
    check("perplexity" in table.out and "<bos>" in table.out, "human table\n" + table.out)
    rows = [line for line in table.out.split("\n") if re.match(r"\s*\d+\s+-?\d+\s", line)]
    check(len(rows) == len(tokens), "one table row per token")

    # Alternatives: each position's likeliest tokens, in order; the logprobs stay as they were.
    rc = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)), "--top-logprobs", 3,
                "--json")
    expect_ok(rc)
    top = json.loads(rc.out)
    check(top["logprobs"] == scored["logprobs"] and top["top_logprobs"][0] is None
          and all(len(row) == 3 and row[0][1] >= row[1][1] >= row[2][1] and row[0][1] >= lp
                  for row, lp in zip(top["top_logprobs"][1:], scored["logprobs"][1:])),
          "score --top-logprobs: %s" % top["top_logprobs"])
    table = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)), "--top-logprobs", 2)
    check(table.rc == 0 and len(table.out.split("\n")) >= 3 * len(tokens) - 2,
          "the table lists the alternatives under each token\n" + table.out)

    # HierGen's logits equal teacher forcing: greedy generation's logprobs are the scores.
    prompt = tokens[:5]
    _, generated = generate("--tokens", ",".join(map(str, prompt)), "--mode", "hiergen",
                            "-n", 12, "--ignore-eos")
    if generated:
        rescored = score(m, prompt + generated["tokens"])
        expected = rescored["logprobs"][len(prompt):]
        check(len(expected) == len(generated["logprobs"]) and all(
            abs(a - b) < 2e-3 for a, b in zip(expected, generated["logprobs"])),
              "hiergen logprobs %s == scores %s" % (generated["logprobs"], expected))


def windows(n, context, stride):
    """The sliding windows of photon_score_options_set_stride: (begin, first scored, end)."""
    out = [(0, 0, min(n, context))]
    while out[-1][2] < n:
        begin = out[-1][0] + stride
        out.append((begin, out[-1][2], min(n, begin + context)))
    return out


def group_windows():
    """Sequences longer than the context are scored in sliding windows; each window's scores
    equal a separate score of that window's tokens (the documented layout)."""
    config = os.path.join(WORK, "short-context.json")
    with open(config, "w") as f:
        json.dump(dict(TINY_CONFIG, max_seq_len=64), f)
    m = os.path.join(WORK, "short-context.photon")
    expect_ok(photon("init", "--config", config, "--seed", 3, "-o", m))
    tokens = [1] + [3 + (i * 37) % 4000 for i in range(149)]
    for extra, stride, mode in [([], 32, "hiergen"), (["--stride", 20], 20, "hiergen"),
                                (["--mode", "recgen", "--prompt-tokens", 5], 32, "recgen")]:
        what = "%s stride %d" % (mode, stride)
        result = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)), "--json",
                        *extra)
        if not expect_ok(result):
            continue
        whole = json.loads(result.out)
        layout = windows(len(tokens), 64, stride)
        check(whole["windows"] == len(layout) and whole["stride"] == stride and
              whole["context"] == 64 and whole["predicted"] == len(tokens) - 1,
              what + ": %s windows, stride %s" % (whole["windows"], whole["stride"]))
        expected = [None] * len(tokens)
        for begin, first, end in layout:
            prompt = 5 if begin == 0 else first - begin
            args = ["--mode", mode, "--prompt-tokens", prompt] if mode == "recgen" else []
            part = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens[begin:end])),
                          "--json", *args)
            if expect_ok(part):
                logprobs = json.loads(part.out)["logprobs"]
                expected[first:end] = logprobs[first - begin:]
        check(whole["logprobs"] == expected, what + ": windows scored one by one differ")
        nll = -sum(whole["logprobs"][1:])
        check(abs(whole["nll"] - nll) < 1e-6 * nll and
              abs(whole["perplexity"] - math.exp(nll / (len(tokens) - 1))) <
              1e-6 * whole["perplexity"], what + ": nll and perplexity over every token")
    table = photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)))
    check(table.rc == 0 and "windows 4 of 64 tokens, stride 32" in table.out,
          "the table's summary names the windows\n" + table.describe())
    short = score(m, tokens[:64])
    check(short is not None and short["windows"] == 1 and short["stride"] is None,
          "a sequence within the context is one window")
    expect_failure(photon("score", "-m", m, "--tokens", ",".join(map(str, tokens)), "--stride",
                          64), 2, "score", "--stride")


def group_generate():
    m = model("photon-small")
    info = inspect_json(m)
    text, out = generate("--tokens", "1,2,3", "-n", 8, "--ignore-eos")
    check(len(out["tokens"]) == 8 and len(out["logprobs"]) == 8, "-n 8 with --ignore-eos")
    check(out["stop_reason"] == "length" and out["prompt_tokens"] == 3, "length, 3 prompt tokens")
    check(out["mode"] == "recgen", "auto is recgen for 2-level PHOTON")
    check(all(0 <= t < info["vocab_size"] for t in out["tokens"]), "ids in the vocabulary")
    check(all(x <= 0 for x in out["logprobs"]), "logprobs <= 0")

    _, out = generate("--tokens", "1,2,3", "-n", 5)
    check(len(out["tokens"]) <= 5, "-n 5 is a budget")
    check(len(out["tokens"]) == 5 or out["stop_reason"] == "eos", "short only at eos")
    check(info["eos"] not in out["tokens"], "eos is not delivered")
    _, out = generate("--tokens", "1,2,3", "-n", 0)
    check(out.get("tokens") == [], "-n 0 generates nothing")

    sampling = ["--tokens", "1,2,3", "-n", 16, "--ignore-eos", "--temperature", 0.9, "--top-k",
                50, "--top-p", 0.95, "--min-p", 0.01, "--repeat-penalty", 1.1, "--repeat-last-n",
                32]
    first = generate(*sampling, "--seed", 7)
    check(first == generate(*sampling, "--seed", 7), "same seed, same output")
    penalized = sampling + ["--presence-penalty", 0.5, "--frequency-penalty", 0.5]
    check(generate(*penalized, "--seed", 7) != first, "the penalties change the draw")
    _, greedy = generate("--tokens", "1,2,3", "-n", 8, "--ignore-eos")
    banned = greedy["tokens"][0]
    _, out = generate("--tokens", "1,2,3", "-n", 8, "--ignore-eos", "--logit-bias",
                      "%d=-100" % banned)
    check(banned not in out["tokens"], "--logit-bias %d=-100 bans it: %s" % (banned, out))
    result = photon("generate", "-m", m, "--tokens", "1,2", "--logit-bias", "%d=1" % info["vocab_size"])
    check(result.rc != 0 and "outside the model's vocabulary" in result.err,
          "a biased id outside the vocabulary\n" + result.describe())
    check(generate("--tokens", "1,2,3", "-n", 8) == generate("--tokens", "1,2,3", "-n", 8),
          "greedy is deterministic")

    _, out = generate("--tokens", "1,2,3", "-n", 4, "--mode", "hiergen")
    check(out.get("mode") == "hiergen", "--mode hiergen")
    _, out = generate("--tokens", "1,2,3", "-n", 4, "--mode", "recgen")
    check(out.get("mode") == "recgen", "--mode recgen")
    _, out = generate("--tokens", "1,2,3", "-n", 4, path=model("vanilla-small"))
    check(out.get("mode") == "hiergen", "vanilla decodes plainly (reported as hiergen)")
    _, exact = generate("--tokens", "1,2,3", "-n", 12, "--ignore-eos")
    check(exact.get("kv_type") == "f32", "f32 KV caches by default: %s" % exact)
    for kv_type in ("bf16", "f16"):
        _, rounded = generate("--tokens", "1,2,3", "-n", 12, "--ignore-eos", "--kv-type", kv_type)
        check(rounded.get("kv_type") == kv_type and len(rounded.get("tokens", [])) == 12,
              "--kv-type %s: %s" % (kv_type, rounded))

    text, out = generate("-p", "Hello world", "-n", 6)
    check(text.startswith("Hello world"), "-p echoes the prompt: %r" % text)
    check(out.get("prompt_tokens", 0) >= 2, "the prompt gets BOS")
    check(text == "Hello world" + out.get("text", "?"),
          "the JSON's text is the generated text: %r, %r" % (text, out.get("text")))
    piped = photon("generate", "-m", m, "-p", "-", "-n", 6, "--json", stdin=b"Hello world")
    check(piped.rc == 0 and split_generate(piped) == (text, out),
          "-p - reads the prompt from stdin\n" + piped.describe())

    # stdout and stderr into one file: the completion's newline comes before the summary.
    proc = subprocess.run([PHOTON, "generate", "-m", m, "--tokens", "1,2,3", "-n", "4",
                           "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=clean_env())
    combined = proc.stdout.decode("utf-8", "replace")
    start = combined.rfind("photon generate: ")
    check(proc.returncode == 0 and start > 0 and combined[start - 1] == "\n" and
          combined.endswith("\n") and "\n" not in combined[start:-1],
          "the summary is a line of its own after the text: %r" % combined)

    _, out = generate("--tokens", "1,2,3", "-n", 50, "--ctx", 8, "--ignore-eos")
    check(out.get("stop_reason") == "context_full" and len(out.get("tokens", [])) == 5,
          "--ctx 8 holds 3 + 5 tokens: %s" % out)

    # A stop string taken from the greedy completion stops it at the token that produces it.
    text, out = generate("--tokens", "1,2,3", "-n", 24, "--ignore-eos")
    visible = text.lstrip()
    if check(visible != "", "the greedy completion has text: %r" % text):
        stop = visible[:1]
        _, stopped = generate("--tokens", "1,2,3", "-n", 24, "--ignore-eos", "--stop", stop)
        check(stopped.get("stop_reason") == "stop_string", "--stop %r: %s" % (stop, stopped))
        check(stopped.get("tokens") == out["tokens"][:len(stopped.get("tokens", []))],
              "a stopped completion is a prefix of the full one")

    # --context-shift: past a full --ctx, as a run prompted with the last half of the history.
    sampling = ["--ignore-eos", "--temperature", 0.9, "--seed", 3, "--ctx", 16]
    _, shifted = generate("--tokens", "1,2,3", "-n", 30, "--context-shift", *sampling)
    expected, logprobs, prompt = [], [], [1, 2, 3]
    while len(expected) < 30:
        _, part = generate("--tokens", ",".join(map(str, prompt)), "-n", 30 - len(expected),
                           *sampling)
        expected += part.get("tokens", [])
        logprobs += part.get("logprobs", [])
        if part.get("stop_reason") != "context_full":
            break
        prompt = (prompt + part["tokens"])[-8:]
    check(len(expected) == 30 and shifted.get("tokens") == expected and
          shifted.get("logprobs") == logprobs and shifted.get("stop_reason") == "length",
          "--context-shift equals prompting anew with the last half: %s vs %s" % (shifted,
                                                                                  expected))

    human = photon("generate", "-m", m, "--tokens", "1,2,3", "-n", 4, "--ignore-eos")
    expect_ok(human)
    check(human.out.endswith("\n") and "stop_reason" not in human.out, "no JSON without --json")
    check("tok/s" in human.err and "stop: length" in human.err, "summary on stderr: " + human.err)
    from_env = photon("generate", "--tokens", "1,2,3", "-n", 4, "--json",
                      env=clean_env(PHOTON_MODEL=m))
    check(from_env.rc == 0 and split_generate(from_env)[1].get("prompt_tokens") == 3,
          "PHOTON_MODEL is the default model")


def group_interrupt():
    """Ctrl-C cancels generation through photon_session_cancel: a clean exit, never a signal."""
    proc = subprocess.Popen([PHOTON, "generate", "-m", model("photon-small"), "-p", "x", "-n",
                             "100000", "--ignore-eos", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    # The echoed prompt: the handler is installed by now, and the ~16k tokens the context still
    # holds take far longer to generate than the signal takes to arrive.
    first = proc.stdout.read(1)
    proc.send_signal(signal.SIGINT)
    try:
        rest, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        check(False, "Ctrl-C did not stop generation within 300 s")
        return
    out = (first + rest).decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")
    check(proc.returncode >= 0, "killed by signal %d: %s" % (-proc.returncode, err))
    check(proc.returncode == 130, "exit code %d after Ctrl-C: %s" % (proc.returncode, err))
    lines = out.split("\n")
    cancelled = len(lines) >= 2 and lines[-2].startswith("{") and \
        json.loads(lines[-2])["stop_reason"] == "cancelled"
    check(cancelled or "cancelled" in err, "a cancelled run says so: %s %s" % (out[-300:], err))


def group_resume():
    """-n 40 equals -n 20 --save-session followed by --resume -n 20, in every mode."""
    sampling = ["--temperature", "0.8", "--seed", "42"]
    for name, mode in [("photon-small", "hiergen"), ("photon-small", "recgen"), ("vanilla-small", "auto")]:
        state = os.path.join(WORK, "resume-%s-%s.phss" % (name, mode))
        common = ["--mode", mode, "-p", "In the beginning"] + sampling
        _, whole = generate(*common, "-n", 40, path=model(name))
        _, first = generate(*common, "-n", 20, "--save-session", state, path=model(name))
        _, second = generate("--resume", state, "-n", 20, path=model(name))
        check(whole.get("tokens") == first.get("tokens", []) + second.get("tokens", []),
              "%s %s: resumed tokens differ from one run" % (name, mode))
        check(len(whole.get("tokens", [])) == 40, "%s %s: expected 40 tokens" % (name, mode))
        # Sampling flags override the saved settings; mode and context come from the state.
        _, greedy = generate("--resume", state, "-n", 5, "--temperature", "0", path=model(name))
        check(len(greedy.get("tokens", [])) == 5, "%s %s: override run" % (name, mode))
        expect_failure(photon("generate", "-m", model(name), "--resume", state, "--mode", "hiergen"), 2,
                       "generate", "--resume")
        expect_failure(photon("generate", "-m", model(name), "--resume", state, "--kv-type", "bf16"),
                       2, "generate", "--resume")
        expect_failure(photon("generate", "-m", model("vanilla-small" if name != "vanilla-small" else "photon-small"),
                              "--resume", state), 1, "generate", "different model")
    expect_failure(photon("generate", "-m", model("photon-small"), "--resume", model("photon-small")), 1,
                   "generate", "not a PHOTON session state")
    # A state saved with bf16 KV caches resumes with them, and continues as one run does.
    state = os.path.join(WORK, "resume-bf16.phss")
    common = ["--mode", "recgen", "-p", "In the beginning", "--kv-type", "bf16"] + sampling
    _, whole = generate(*common, "-n", 30)
    _, first = generate(*common, "-n", 15, "--save-session", state)
    _, second = generate("--resume", state, "-n", 15)
    check(second.get("kv_type") == "bf16", "the resumed session keeps bf16 caches: %s" % second)
    check(whole.get("tokens") == first.get("tokens", []) + second.get("tokens", []),
          "bf16 KV caches: resumed tokens differ from one run")


def bench(*argv):
    """photon bench on the setup models with JSON lines on stdout -> the records."""
    result = photon("bench", "-m", model("photon-small"), "-m", model("vanilla-small"),
                    "--json", "-", *argv)
    if not expect_ok(result):
        return []
    return [json.loads(line) for line in result.out.split("\n") if line.strip()]


# KV bytes of the small presets by the spec's arithmetic (f32): layers x 2 x positions x kv_dim x 4.
# photon-small: 2 levels, C 4 x 4, encoders of 2 layers, kv_dim 256; vanilla-small: 8 layers, 256.
def small_kv_bytes(mode, tokens):
    if mode == "vanilla":
        return 8 * 2 * tokens * 256 * 4
    top = 2 * 2 * (tokens // 16) * 256 * 4
    return top if mode == "recgen" else top + 2 * 2 * (tokens // 4) * 256 * 4


def group_bench():
    runs = bench("--regime", "24:8", "--regime", "8:12", "--batch", 2)
    check(len(runs) == 6, "two regimes x (hiergen, recgen, vanilla): %d records" % len(runs))
    check(sorted({(r["model"], r["mode"]) for r in runs}) ==
          [("photon-small", "hiergen"), ("photon-small", "recgen"), ("vanilla-small", "vanilla")],
          "models and modes: %s" % [(r["model"], r["mode"]) for r in runs])
    for r in runs:
        what = "%s %s %s" % (r["model"], r["mode"], r["regime"])
        prompt, generated = map(int, r["regime"].split(":"))
        check(r["study"] == "throughput" and r["batch"] == 2 and r["batch_rule"] == "fixed", what)
        check(r["prompt_tokens"] == prompt and r["generated_tokens"] == generated, what)
        check(r["tokens_generated"] == 2 * generated, what + ": EOS is ignored")
        check(r["warm_up_tokens"] == 0, what + ": no warm-up run on the CPU")
        check(r["wall_s"] >= r["decode_s"] > 0 and r["prefill_s"] > 0, what + ": times")
        check(abs(r["throughput_tok_s"] - r["tokens_generated"] / r["wall_s"]) <=
              1e-6 * r["throughput_tok_s"], what + ": throughput includes prefill")
        check(r["kv_analytic_bytes_per_sample"] == small_kv_bytes(r["mode"], prompt + generated),
              what + ": KV formula %s" % r["kv_analytic_bytes_per_sample"])
        check(2 * r["kv_analytic_bf16_bytes_per_sample"] == r["kv_analytic_bytes_per_sample"],
              what + ": bf16 is half of f32")
        check(0 < r["kv_engine_bytes_per_sample"] <= r["kv_analytic_bytes_per_sample"],
              what + ": the engine holds at most the formula's bytes")
        check(r["resident_growth_bytes_per_sample"] > 0, what + ": resident memory grew")
        check(r["peak_growth_bytes_per_sample"] >= r["resident_growth_bytes_per_sample"],
              what + ": peak >= resident")
        gib = r["resident_growth_bytes_per_sample"] / 2 ** 30
        check(abs(r["tpm_resident_tok_s_per_gib"] - r["throughput_tok_s"] / gib) <=
              1e-6 * r["tpm_resident_tok_s_per_gib"], what + ": TPM")
        for key in ["cpu", "hardware_threads", "load_average", "parameters", "sdk_version"]:
            check(key in r, what + ": has " + key)

    halved = bench("--regime", "16:16", "--mode", "recgen", "--mode", "vanilla", "--kv-type", "bf16")
    exact = bench("--regime", "16:16", "--mode", "recgen", "--mode", "vanilla")
    check(len(halved) == 2 and len(exact) == 2 and
          all(h.get("kv_type") == "bf16" and e.get("kv_type") == "f32" and
              2 * h["kv_engine_bytes_per_sample"] == e["kv_engine_bytes_per_sample"]
              for h, e in zip(halved, exact)),
          "bench --kv-type bf16 records half the KV bytes: %s" % halved)

    # The default output is the markdown table in the paper's layout.
    markdown = os.path.join(WORK, "bench.md")
    result = photon("bench", "-m", model("photon-small"), "--mode", "recgen", "--regime", "8:8",
                    "--markdown", markdown)
    expect_ok(result)
    check("| model | parameters | mode | batch | TPM 8:8 | MiB/sample 8:8 | tok/s 8:8 |"
          in result.out, "markdown header\n" + result.describe())
    check(re.search(r"^\| photon-small \| 9\.7 M \| recgen \| 1 \|", result.out, re.M) is not None,
          "markdown row\n" + result.describe())
    check(os.path.exists(markdown) and open(markdown).read() == result.out, "--markdown FILE")

    # KV after the model consumed 64 tokens equals the spec's arithmetic; RecGen keeps the top only.
    kv = {r["mode"]: r for r in bench("--study", "kv", "--context", 64, "--decode-tokens", 4)}
    check(sorted(kv) == ["hiergen", "recgen", "vanilla"], "kv modes %s" % sorted(kv))
    for mode, r in kv.items():
        check(r["context_tokens"] == 64 and r["session_tokens"] == 65, mode + ": tokens")
        check(r["kv_engine_bytes"] == small_kv_bytes(mode, 64) == r["kv_analytic_bytes"],
              "%s: engine %s, formula %s" % (mode, r["kv_engine_bytes"], r["kv_analytic_bytes"]))
        check(sum(level["engine_encoder_bytes"] for level in r["levels"]) == r["kv_engine_bytes"],
              mode + ": levels add up")
    if len(kv) == 3:
        check(kv["recgen"]["levels"][0]["engine_encoder_bytes"] == 0, "recgen: no level-1 cache")
        check(kv["vanilla"]["kv_engine_bytes"] == 64 * kv["recgen"]["kv_engine_bytes"],
              "vanilla holds 64x RecGen's KV here")

    scaling = bench("--study", "scaling", "--contexts", "80,48", "--decode-tokens", 16,
                    "--mode", "recgen", "--mode", "vanilla")
    check([(r["mode"], r["context_tokens"]) for r in scaling] ==
          [("recgen", 48), ("recgen", 80), ("vanilla", 48), ("vanilla", 80)],
          "scaling points %s" % [(r["mode"], r["context_tokens"]) for r in scaling])
    for r in scaling:
        check(r["tokens_generated"] == 16 and r["decode_ms_per_token"] > 0, "scaling timing")
        check(r["kv_engine_bytes"] == small_kv_bytes(r["mode"], r["context_tokens"] - 1),
              "scaling KV %s %s" % (r["mode"], r["context_tokens"]))

    sized = bench("--mode", "recgen", "--regime", "16:8", "--memory-budget", 0.05,
                  "--max-batch", 4)
    if check(len(sized) == 1, "one budget run"):
        r = sized[0]
        trials = r.get("batch_trials", [])
        check(r["batch_rule"] == "memory_budget" and 1 <= r["batch"] <= 4, "budget batch")
        check(r["memory_budget_bytes"] == int(0.05 * 2 ** 30), "budget bytes")
        check(any(t["batch"] == r["batch"] and t["fits"] for t in trials), "chosen batch fits")
        check(all(not t["fits"] for t in trials if t["batch"] > r["batch"]),
              "every larger trial failed: %s" % trials)
        check(all(t["fits"] == (t["peak_growth_bytes"] <= r["memory_budget_bytes"])
                  for t in trials), "fits means the peak is within the budget")

    m = model("photon-small")
    expect_failure(photon("bench"), 2, "bench", "no model")
    expect_failure(photon("bench", "-m", m, "--study", "speed"), 2, "bench", "--study")
    expect_failure(photon("bench", "-m", m, "--batch", 0), 2, "bench", "--batch")
    expect_failure(photon("bench", "-m", m, "--regime", "128"), 2, "bench", "--regime")
    expect_failure(photon("bench", "-m", m, "--mode", "fast"), 2, "bench", "--mode")
    expect_failure(photon("bench", "-m", m, "--batch", 2, "--memory-budget", 1), 2, "bench")
    expect_failure(photon("bench", "-m", m, "--mode", "vanilla"), 2, "bench", "no model runs")
    expect_failure(photon("bench", "-m", m, "--regime", "20000:10"), 1, "bench", "at most 16384")
    expect_failure(photon("bench", "-m", m, "--mode", "recgen", "--regime", "8:8",
                          "--memory-budget", 0.0000001), 1, "bench", "--memory-budget")
    expect_failure(photon("bench", "--preset", "photon-9t"), 2, "bench", "photon-9t")


def group_device():
    """--device: the CPU by default and by name; auto lands on a usable device; cuda runs, or fails
    in one line naming what is missing; a value that is no device is a usage error. --precision:
    exact by default on the CPU, bf16 when asked, recorded by generate and bench; a value that is
    no precision is a usage error naming it."""
    m = model("photon-small")
    prompt = ["--tokens", "1,2,3", "-n", 6, "--ignore-eos"]
    _, default = generate(*prompt)
    _, cpu = generate(*prompt, "--device", "cpu")
    check(default.get("device") == "cpu" and cpu == default, "cpu is the default: %s" % cpu)
    _, auto = generate(*prompt, "--device", "auto")
    check(auto.get("device") == "cpu" or auto.get("device", "").startswith("cuda:"),
          "auto picks cpu or a GPU: %s" % auto)
    cuda = photon("generate", "-m", m, *prompt, "--device", "cuda", "--json")
    if cuda.rc == 0:
        check(split_generate(cuda)[1].get("device", "").startswith("cuda:"), "runs on a GPU")
    else:
        named = [w for w in ("no CUDA module", "no CUDA runtime", "no CUDA driver",
                             "no CUDA device") if w in cuda.err]
        expect_failure(cuda, 1, "generate", "PHOTON_ERR_DEVICE")
        check(len(named) == 1, "the message names what is missing: " + cuda.err)
    missing = photon("score", "-m", m, "--tokens", "1,2,3", "--device", "cuda",
                     env=clean_env(PHOTON_CUDA_MODULE="/nonexistent/libphoton-cuda.so"))
    expect_failure(missing, 1, "score", "no CUDA module")
    expect_failure(photon("generate", "-m", m, *prompt, "--device", "gpu"), 2, "generate",
                   "--device")
    expect_failure(photon("score", "-m", m, "--tokens", "1,2", "--device", "cuda:x"), 2, "score",
                   "--device")
    expect_failure(photon("bench", "-m", m, "--device", "cuda:"), 2, "bench", "--device")
    runs = bench("--regime", "4:4", "--mode", "recgen", "--device", "cpu")
    check(len(runs) == 1 and runs[0].get("device") == "cpu", "bench records the device")
    for command in ("generate", "score", "bench"):
        check("--device DEV" in photon(command, "--help").out, "%s --help shows --device" % command)
    # --precision: exact is the CPU's default; bf16 rounds the products' input, so the
    # log-probabilities move a little; anything else is a usage error naming it.
    check(default.get("precision") == "exact", "exact is the CPU's default: %s" % default)
    _, bf16 = generate(*prompt, "--precision", "bf16")
    check(bf16.get("precision") == "bf16", "--precision bf16 is reported: %s" % bf16)
    moved = [abs(x - y) for x, y in zip(bf16.get("logprobs", []), default.get("logprobs", []))]
    check(len(moved) == 6 and 0 < max(moved) < 0.5,
          "bf16 moves the log-probabilities a little: %s" % moved)
    runs = bench("--regime", "4:4", "--mode", "recgen", "--precision", "bf16")
    check(len(runs) == 1 and runs[0].get("precision") == "bf16", "bench records the precision")
    for command in ("generate", "score", "bench", "serve"):
        bad = photon(command, "-m", m, "--tokens", "1,2", "--precision", "fp8") \
            if command in ("generate", "score") else photon(command, "-m", m, "--precision", "fp8")
        expect_failure(bad, 2, command, "--precision")
        check("'fp8'" in bad.err, "%s names the bad precision: %s" % (command, bad.err))
        check("--precision" in photon(command, "--help").out,
              "%s --help shows --precision" % command)


GROUPS = {
    "bench": group_bench,
    "device": group_device,
    "resume": group_resume,
    "setup": group_setup, "usage": group_usage, "errors": group_errors,
    "tokenizer": group_tokenizer, "windows": group_windows,
    "inspect": group_inspect, "convert": group_convert, "score": group_score,
    "generate": group_generate, "interrupt": group_interrupt,
}


def main():
    global PHOTON, WORK
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photon", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("group", choices=sorted(GROUPS))
    args = parser.parse_args()
    PHOTON, WORK = os.path.abspath(args.photon), os.path.abspath(args.work_dir)
    os.makedirs(WORK, exist_ok=True)
    try:
        GROUPS[args.group]()
    except Exception as error:  # a crash of the test itself counts as a failure
        check(False, "%s: %r" % (args.group, error))
        raise
    finally:
        print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
