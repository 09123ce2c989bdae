"""How spread out a PHOTON run's level-1 encoder states are: detects a collapsed X(1).

    PYTHONPATH=python:. /usr/bin/python3 -m training.latents out/train/runs/photon-a0 ...

For each run (its checkpoint.pt), over the first `windows` validation windows: the recursive loss
1 - cos(Xhat(1), X(1)) and the mean cosine between two different X(1) states. A mean pairwise cosine
near 1 means every X(1) points the same way, so a small recursive loss says little about how well
the top-down pathway reconstructs what the encoder states carry.
"""

import argparse
import json
import pathlib

import numpy as np
import torch

from photon_ref.model import Config
from training.corpus import BOS
from training.model import build_train_model, recursive_losses


@torch.no_grad()
def latent_stats(run_dir, corpus, windows, seq_len=256):
    model_json = json.loads((run_dir / "run.json").read_text())["model"]
    model = build_train_model(Config.from_json(model_json))
    state = torch.load(run_dir / "checkpoint.pt")
    model.load_state_dict(state["model"])
    model.eval()
    n = seq_len - 1
    rows = np.load(corpus / "valid.npy")[:windows * n].astype(np.int64).reshape(windows, n)
    tokens = torch.from_numpy(np.concatenate([np.full((windows, 1), BOS), rows], axis=1))
    _, X, Xhat = model.forward_batch(tokens)
    states = X[1].reshape(-1, X[1].shape[-1])
    unit = states / states.norm(dim=-1, keepdim=True)
    cosines = unit @ unit.T
    count = cosines.shape[0]
    pairwise = (cosines.sum() - cosines.diagonal().sum()) / (count * count - count)
    return {"step": state["step"],
            "rec_loss": [float(r) for r in recursive_losses(model, X, Xhat)],
            "mean_pairwise_cos_X1": float(pairwise)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.latents", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=pathlib.Path, help="PHOTON L >= 2 run directories")
    parser.add_argument("--corpus", default="out/train/corpus", type=pathlib.Path)
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for run_dir in args.runs:
        print(json.dumps({"run": str(run_dir), **latent_stats(run_dir, args.corpus,
                                                              args.windows)}))


if __name__ == "__main__":
    main()
