"""Export: a trained model to config.json + model.safetensors (spec section 8), then to .photon.

    PYTHONPATH=python:. /usr/bin/python3 -m training.export --run out/train/photon-a03 \
        --photon build/bin/photon --tokenizer out/train/corpus/tokenizer.model \
        --dtype f16 [--measured out/train/eval.json:photon-kjv] -o models/photon-kjv.photon

writes RUN/final/config.json and model.safetensors from RUN/checkpoint.pt if the run has no final
weights, then runs `photon convert --from RUN/final` (the tokenizer is embedded in the model file);
a run that ended with weights.npz (written before the trainer wrote safetensors) is converted
with --config / --weights. --measured EVAL:NAME
records what training.evaluate measured on model NAME as metadata: photon.recgen_ppl_ratio,
photon.greedy_agreement and photon.default_mode, "recgen" where RecGen's test perplexity is at
most RECGEN_RATIO_LIMIT times HierGen's, else "hiergen" (AUTO sessions use that mode). The
numbers were measured on a file with the same weights, so NAME is usually the output written
once before without --measured.
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import torch

from photon_ref.model import Config
from training.safetensors import load_file, save_file

RECGEN_RATIO_LIMIT = 1.3  # RecGen is the default where it keeps the model's quality


def write_interchange(model, model_json, directory, tokenizer=None):
    """directory/config.json and directory/model.safetensors (float32, spec section 6 names), and
    a copy of the sentencepiece tokenizer if one is given: what `photon convert --from` reads."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(model_json, indent=1) + "\n")
    weights = {name: t.detach().to(torch.float32) for name, t in model.state_dict().items()}
    save_file(weights, directory / "model.safetensors", {"producer": "training.export"})
    if tokenizer is not None:
        shutil.copyfile(tokenizer, directory / "tokenizer.model")


def final_weights(directory):
    """The weights file of a finished run's final/ directory (model.safetensors, or the
    weights.npz of runs from before), or None."""
    for name in ("model.safetensors", "weights.npz"):
        if (pathlib.Path(directory) / name).exists():
            return pathlib.Path(directory) / name
    return None


def load_weights(path):
    """{name: tensor} of a model.safetensors or weights.npz of spec section 6 names."""
    path = pathlib.Path(path)
    if path.suffix == ".safetensors":
        return load_file(path)
    with np.load(path) as npz:
        return {k: torch.from_numpy(npz[k]) for k in npz.files}


def export_checkpoint(run_dir):
    """RUN/final from RUN/checkpoint.pt (for a run stopped before its budget was spent)."""
    from training.model import build_train_model
    run_dir = pathlib.Path(run_dir)
    model_json = json.loads((run_dir / "run.json").read_text())["model"]
    model = build_train_model(Config.from_json(model_json))
    model.load_state_dict(torch.load(run_dir / "checkpoint.pt")["model"])
    write_interchange(model, model_json, run_dir / "final")


def measured_metadata(spec):
    """photon convert --meta arguments from EVAL_JSON:NAME (see the module docstring)."""
    path, _, name = spec.rpartition(":")
    results = json.loads(pathlib.Path(path).read_text())
    if name not in results or "recgen" not in results[name]:
        raise SystemExit(f"export: {path} has no RecGen measurement of '{name}'")
    ratio = results[name]["recgen"]["ratio_to_hiergen"]
    mode = "recgen" if ratio <= RECGEN_RATIO_LIMIT else "hiergen"
    entries = {"photon.recgen_ppl_ratio": f"{ratio:.3f}",
               "photon.greedy_agreement": f"{results[name]['agreement']['token_agreement']:.3f}",
               "photon.default_mode": mode}
    return [arg for key, value in entries.items() for arg in ("--meta", f"{key}={value}")]


def convert(photon, final_dir, tokenizer, output, dtype, meta=()):
    final_dir = pathlib.Path(final_dir)
    pathlib.Path(output).parent.mkdir(parents=True, exist_ok=True)
    weights = final_weights(final_dir)
    source = (["--from", str(final_dir)] if weights.suffix == ".safetensors" else
              ["--config", str(final_dir / "config.json"), "--weights", str(weights)])
    subprocess.run([str(photon), "convert", *source, "--tokenizer", str(tokenizer),
                    "--dtype", dtype, "-o", str(output), *meta], check=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="run directory of training.train")
    parser.add_argument("--photon", default="build/bin/photon", help="the photon CLI")
    parser.add_argument("--tokenizer", default="out/train/corpus/tokenizer.model")
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16", "q8"])
    parser.add_argument("--measured", metavar="EVAL_JSON:NAME",
                        help="record training.evaluate's numbers of NAME as metadata")
    parser.add_argument("-o", "--output", required=True, help="the .photon file to write")
    args = parser.parse_args(argv)
    meta = measured_metadata(args.measured) if args.measured else []
    final = pathlib.Path(args.run) / "final"
    if final_weights(final) is None:
        print(f"export: {final} missing, exporting the last checkpoint", file=sys.stderr)
        export_checkpoint(args.run)
    convert(args.photon, final, args.tokenizer, args.output, args.dtype, meta)


if __name__ == "__main__":
    main()
