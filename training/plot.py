"""Training curves for docs/quality.md (matplotlib, Debian's python3-matplotlib).

    PYTHONPATH=python:. /usr/bin/python3 -m training.plot --runs out/train/runs \
        --out docs/img/training-curves.png

Left: token loss (next-token NLL, nats) of every run against training tokens, training steps
smoothed over a moving window, validation passes as markers. Right: the recursive loss
(1 - cos(Xhat(1), X(1)), the level-2 term of spec 3.4) of the PHOTON runs, as in the paper's
appendix figure "next-token loss vs. recursive loss".
"""

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

RUNS = ["photon-a0", "photon-a03", "photon-a03-sg", "block", "vanilla"]
LABELS = {"photon-a0": "PHOTON L=2, alpha 0", "photon-a03": "PHOTON L=2, alpha 0.3",
          "photon-a03-sg": "PHOTON L=2, alpha 0.3, target detached",
          "block": "Block (PHOTON L=1)", "vanilla": "vanilla"}


def smooth(values, window):
    if len(values) < window:
        return np.asarray(values)
    kernel = np.ones(window) / window
    return np.convolve(values, kernel, mode="valid")


def read(run_dir):
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return ([r for r in records if r["kind"] == "train"],
            [r for r in records if r["kind"] == "valid"])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="out/train/runs", type=pathlib.Path)
    parser.add_argument("--out", default="docs/img/training-curves.png", type=pathlib.Path)
    parser.add_argument("--window", type=int, default=25, help="moving-average steps")
    args = parser.parse_args(argv)

    fig, (ax_tok, ax_rec) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(RUNS):
        run_dir = args.runs / name
        if not (run_dir / "log.jsonl").exists():
            continue
        train, valid = read(run_dir)
        color = f"C{i}"
        tokens = np.array([r["tokens"] for r in train]) / 1e6
        w = min(args.window, len(train))
        ax_tok.plot(tokens[w - 1:], smooth([r["token_loss"] for r in train], w), color=color,
                    label=LABELS[name])
        ax_tok.plot([r["tokens"] / 1e6 for r in valid], [r["token_loss"] for r in valid], "o",
                    color=color, markersize=4)
        if train[0]["rec_loss"]:
            ax_rec.plot(tokens[w - 1:], smooth([r["rec_loss"][0] for r in train], w),
                        color=color, label=LABELS[name])
            ax_rec.plot([r["tokens"] / 1e6 for r in valid], [r["rec_loss"][0] for r in valid],
                        "o", color=color, markersize=4)
    ax_tok.set(xlabel="training tokens (millions)", ylabel="token loss (nats)",
               title="Next-token loss (lines: train, dots: validation)")
    ax_tok.set_ylim(top=8.5)
    ax_rec.set(xlabel="training tokens (millions)", ylabel="1 - cos(Xhat(1), X(1))",
               title="Recursive loss of the PHOTON runs")
    for ax in (ax_tok, ax_rec):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
