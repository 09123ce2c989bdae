#!/usr/bin/env python3
"""Plots of `photon bench` JSON lines: TPM against model size, the throughput / memory Pareto
picture, and decode time per token against context length; and of photon_serving_bench's: time to
first token and throughput against offered load, per scheduler.

usage: /usr/bin/python3 bench/plot.py --out-dir DIR [--prefix NAME] RESULTS.jsonl...

Writes DIR/NAME-tpm, DIR/NAME-pareto, DIR/NAME-scaling and DIR/NAME-serving, each as .png and .svg,
for the studies present in the input. Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

MODES = ["vanilla", "block", "hiergen", "recgen"]
LABELS = {"vanilla": "vanilla (LLaMA)", "block": "Block Transformer (PHOTON L=1)",
          "hiergen": "PHOTON HierGen", "recgen": "PHOTON RecGen"}
COLORS = {"vanilla": "#555555", "block": "#d9822b", "hiergen": "#2b6cb0", "recgen": "#2f855a"}
MARKERS = {"vanilla": "s", "block": "^", "hiergen": "o", "recgen": "D"}
MIB = 1024.0 * 1024.0


def load(paths):
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            records += [json.loads(line) for line in lines if line.strip()]
    return records


def machine(records):
    loads = [r["load_average"] for r in records if r.get("load_average", -1) >= 0]
    text = "%s, %d threads" % (records[0]["cpu"], records[0]["hardware_threads"])
    if loads:
        text += ", load average %.1f-%.1f" % (min(loads), max(loads))
    return text


def save(figure, out_dir, prefix, name):
    for ext, metadata in [("png", {"Software": None}), ("svg", {"Date": None})]:
        figure.savefig("%s/%s-%s.%s" % (out_dir, prefix, name, ext), dpi=110,
                       metadata=metadata, bbox_inches="tight")
    plt.close(figure)


def regimes_of(runs):
    names = []
    for run in runs:
        if run["regime"] not in names:
            names.append(run["regime"])
    return names


def regime_title(run):
    return "%s: %d prompt / %d generated tokens" % (run["regime"], run["prompt_tokens"],
                                                    run["generated_tokens"])


def plot_tpm(runs, out_dir, prefix):
    names = regimes_of(runs)
    figure, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 4.4), squeeze=False,
                                 constrained_layout=True)
    for axis, regime in zip(axes[0], names):
        here = [r for r in runs if r["regime"] == regime]
        for mode in MODES:
            points = sorted((r["parameters"] / 1e6, r["tpm_resident_tok_s_per_gib"] / 1024.0)
                            for r in here if r["mode"] == mode)
            if points:
                axis.plot(*zip(*points), marker=MARKERS[mode], color=COLORS[mode],
                          label=LABELS[mode])
        axis.set_yscale("log")
        axis.set_xlabel("model parameters (millions)")
        axis.set_ylabel("TPM: throughput / memory per sample\n(tok/s per MiB, log scale)")
        axis.set_title(regime_title(here[0]), fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle("Throughput per memory against model size (higher is better)\n" +
                    machine(runs), fontsize=10)
    save(figure, out_dir, prefix, "tpm")


def pareto_front(points):
    """Points no other point beats on both less memory and more throughput."""
    front = []
    for memory, throughput in sorted(points):
        if not front or throughput > front[-1][1]:
            front.append((memory, throughput))
    return front


def plot_pareto(runs, out_dir, prefix):
    names = regimes_of(runs)
    figure, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 4.6), squeeze=False,
                                 constrained_layout=True)
    for axis, regime in zip(axes[0], names):
        here = [r for r in runs if r["regime"] == regime]
        every = []
        for mode in MODES:
            mine = [r for r in here if r["mode"] == mode]
            if not mine:
                continue
            xs = [r["resident_growth_bytes_per_sample"] / MIB for r in mine]
            ys = [r["throughput_tok_s"] for r in mine]
            every += list(zip(xs, ys))
            axis.scatter(xs, ys, marker=MARKERS[mode], color=COLORS[mode], label=LABELS[mode],
                         zorder=3)
            for r, x, y in zip(mine, xs, ys):
                axis.annotate("%.0fM" % (r["parameters"] / 1e6), (x, y), fontsize=7,
                              xytext=(4, 3), textcoords="offset points")
        front = pareto_front(every)
        axis.plot(*zip(*front), color="#999999", linestyle="--", linewidth=1, zorder=2,
                  label="Pareto frontier")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("memory per sample (MiB, resident growth, log scale)")
        axis.set_ylabel("throughput (generated tok/s, log scale)")
        axis.set_title(regime_title(here[0]) + ", batch %d" % here[0]["batch"], fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle("Throughput against memory per sample (up and left is better)\n" +
                    machine(runs), fontsize=10)
    save(figure, out_dir, prefix, "pareto")


def plot_scaling(runs, out_dir, prefix):
    figure, (time_axis, kv_axis) = plt.subplots(1, 2, figsize=(11.2, 4.4), constrained_layout=True)
    series = []
    for run in runs:
        if (run["model"], run["mode"]) not in series:
            series.append((run["model"], run["mode"]))
    for model, mode in series:
        mine = sorted((r for r in runs if r["model"] == model and r["mode"] == mode),
                      key=lambda r: r["context_tokens"])
        xs = [r["context_tokens"] for r in mine]
        style = dict(marker=MARKERS[mode], color=COLORS[mode],
                     label="%s, %s" % (model, LABELS[mode]))
        time_axis.plot(xs, [r["decode_ms_per_token"] for r in mine], **style)
        kv_axis.plot(xs, [r["kv_engine_bytes"] / MIB for r in mine], **style)
    contexts = sorted({r["context_tokens"] for r in runs})
    for axis in (time_axis, kv_axis):
        axis.set_xscale("log", base=2)
        axis.set_xticks(contexts, [str(n) for n in contexts], fontsize=8)
        axis.minorticks_off()
        axis.set_xlabel("context length (tokens, log scale)")
        axis.grid(True, which="both", alpha=0.3)
    time_axis.set_ylabel("decode time per generated token (ms)")
    time_axis.set_ylim(bottom=0)
    time_axis.set_title("decode cost per token, one session", fontsize=10)
    kv_axis.set_yscale("log")
    kv_axis.set_ylabel("KV cache held (MiB, f32, log scale)")
    kv_axis.set_title("KV bytes of the caches that grow with the context", fontsize=10)
    time_axis.legend(fontsize=8)
    figure.suptitle("Decoding as the context grows\n" + machine(runs), fontsize=10)
    save(figure, out_dir, prefix, "scaling")


SCHEDULER_STYLE = {"engine": ("#2f855a", "o"), "static": ("#d9822b", "^"),
                   "sequential": ("#555555", "s")}


def plot_serving(rows, out_dir, prefix):
    """p99 time to first token and throughput against the arrival rate, a line per scheduler and
    model."""
    figure, (ttft, tput) = plt.subplots(1, 2, figsize=(11, 4.2))
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    for m, model in enumerate(models):
        name = model.rsplit("/", 1)[-1].split(".photon")[0]
        for scheduler, (color, marker) in SCHEDULER_STYLE.items():
            line = sorted((r for r in rows if r["model"] == model and r["scheduler"] == scheduler),
                          key=lambda r: r["rate"])
            if not line:
                continue
            style = dict(color=color, marker=marker, linestyle=["-", "--", ":"][m % 3],
                         label="%s, %s" % (scheduler, name))
            ttft.plot([r["rate"] for r in line], [r["ttft_p99_ms"] / 1000 for r in line], **style)
            tput.plot([r["rate"] for r in line], [r["tok_s"] for r in line], **style)
    ttft.set(xlabel="offered load (requests / s)", ylabel="time to first token, p99 (s)",
             xscale="log", yscale="log")
    tput.set(xlabel="offered load (requests / s)", ylabel="generated tokens / s", xscale="log")
    plain = matplotlib.ticker.FormatStrFormatter("%g")
    for axes in (ttft, tput):
        axes.grid(alpha=0.3)
        axes.xaxis.set_major_formatter(plain)
        axes.xaxis.set_minor_formatter(plain)
        axes.yaxis.set_major_formatter(plain)
    tput.legend(fontsize=8)
    first = rows[0]
    figure.suptitle("Serving: %d prompt / %d generated tokens per request"
                    % (first["prompt"], first["output"]))
    save(figure, out_dir, prefix, "serving")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("results", nargs="+")
    args = parser.parse_args()
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVGs
    plt.rcParams["svg.hashsalt"] = "photon-bench"  # the same data gives the same file
    records = load(args.results)
    throughput = [r for r in records if r.get("study") == "throughput"]
    scaling = [r for r in records if r.get("study") == "scaling"]
    serving = [r for r in records if "scheduler" in r]
    if throughput:
        plot_tpm(throughput, args.out_dir, args.prefix)
        plot_pareto(throughput, args.out_dir, args.prefix)
    if scaling:
        plot_scaling(scaling, args.out_dir, args.prefix)
    if serving:
        plot_serving(serving, args.out_dir, args.prefix)
    if not throughput and not scaling and not serving:
        print("plot.py: no throughput, scaling or serving records in the input", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
