"""The quality tables of docs/quality.md, in Markdown, from training.evaluate's JSON.

    PYTHONPATH=python:. /usr/bin/python3 -m training.report out/train/eval.json \
        [--recgen] [--vanilla-perplexity P] [--update docs/quality.md]

prints the table (--recgen: the RecGen quality table of the PHOTON L >= 2 models, against the
targets of docs/quality.md, "RecGen quality"); --update also writes it between the table's marker lines in the file.
"""

import argparse
import json
import pathlib

MARKERS = {False: ("<!-- quality-table: begin (training.report) -->",
                   "<!-- quality-table: end -->"),
           True: ("<!-- recgen-table: begin (training.report --recgen) -->",
                  "<!-- recgen-table: end -->")}

ORDER = ["photon-a0", "photon-a03", "photon-a03-sg", "block", "vanilla", "photon-a0-ft-rg1",
         "photon-a0-ft-rg3", "photon-rg", "photon-c8x2-a0", "photon-c8x2-a0-ft-rg1",
         "photon-c8x2-rg", "photon-c8x2-rg-w15", "photon-c8x2-rg-w2", "photon-c16x2-rg",
         "photon-c32x2-rg", "photon-c32x2-rg-mix", "photon-c32x2-rg-ft-mix", "photon-kjv"]
NAMES = {"photon-a0": "PHOTON L=2 (C 4x4), alpha 0", "photon-a03": "PHOTON L=2 (C 4x4), alpha 0.3",
         "photon-a03-sg": "PHOTON L=2 (C 4x4), alpha 0.3, target detached",
         "block": "Block (PHOTON L=1, C 4)", "vanilla": "vanilla",
         "photon-a0-ft-rg1": "alpha 0 + RecGen fine-tune (0.2 M tokens, weight 1)",
         "photon-a0-ft-rg3": "alpha 0 + RecGen fine-tunes (0.2 M tokens at weight 1, 0.2 M at 3)",
         "photon-rg": "PHOTON L=2 (C 4x4), RecGen loss from scratch (weight 1)",
         "photon-c8x2-a0": "PHOTON L=2 (C 8x2), alpha 0",
         "photon-c8x2-a0-ft-rg1": "C 8x2, alpha 0 + RecGen fine-tune (0.2 M tokens, weight 1)",
         "photon-c8x2-rg": "PHOTON L=2 (C 8x2), RecGen loss from scratch (weight 1)",
         "photon-c8x2-rg-w15": "PHOTON L=2 (C 8x2), RecGen loss from scratch (weight 1.5)",
         "photon-c8x2-rg-w2": "PHOTON L=2 (C 8x2), RecGen loss from scratch (weight 2)",
         "photon-c16x2-rg": "PHOTON L=2 (C 16x2), RecGen loss from scratch (weight 1)",
         "photon-c32x2-rg": "PHOTON L=2 (C 32x2), RecGen loss from scratch (weight 1)",
         "photon-c32x2-rg-mix": "C 32x2, RecGen loss and self-distillation (0.5) from scratch",
         "photon-c32x2-rg-ft-mix": "C 32x2, RecGen loss + fine-tune with self-distillation (0.2 M)",
         "photon-kjv": "models/photon-kjv.photon (f16)"}


def kib(n):
    return f"{n / 1024:.1f}"


def table(results):
    rows = ["| model | parameters | test perplexity | RecGen = HierGen tokens | common prefix "
            "| recursive loss, train / valid | decode tok/s, HierGen / RecGen "
            "| KV KiB at 256 tokens, HierGen / RecGen |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    names = [n for n in ORDER if n in results] + [n for n in results if n not in ORDER]
    for name in names:
        r = results[name]
        training = r.get("training", {})
        params = f"{r['parameters']:,}" if r.get("parameters") else ""
        agreement = r.get("agreement")
        agree = f"{100 * agreement['token_agreement']:.1f} %" if agreement else "n/a"
        prefix = f"{agreement['mean_common_prefix']:.1f}" if agreement else "n/a"
        if training.get("train_rec_loss"):
            rec = f"{training['train_rec_loss'][0]:.4f} / {training['valid_rec_loss'][0]:.4f}"
        else:
            rec = "n/a"
        decode = r.get("decode", {})
        speed = " / ".join(f"{decode[m]['tokens_per_s']:.0f}" for m in ("hiergen", "recgen")
                           if m in decode) or "-"
        kv = " / ".join(kib(decode[m]["kv_bytes"]) for m in ("hiergen", "recgen")
                        if m in decode) or "-"
        rows.append(f"| {NAMES.get(name, name)} | {params} | {r['test']['perplexity']:.2f} | "
                    f"{agree} | {prefix} | {rec} | {speed} | {kv} |")
    return "\n".join(rows)


def recgen_table(results, vanilla_perplexity):
    """One row per PHOTON L >= 2 model: HierGen and RecGen perplexity of the tokens after the
    prompt, their ratio (target <= 1.3), greedy agreement (target >= 60 %), HierGen test perplexity
    over vanilla's (target <= 1.25)."""
    rows = ["| model | HierGen test perplexity | / vanilla | HierGen after prompt "
            "| RecGen after prompt | RecGen / HierGen | RecGen = HierGen tokens | common prefix |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    names = [n for n in ORDER if n in results] + [n for n in results if n not in ORDER]
    for name in names:
        r = results[name]
        if "recgen" not in r:
            continue
        test, recgen, agreement = r["test"], r["recgen"], r["agreement"]
        rows.append(f"| {NAMES.get(name, name)} | {test['perplexity']:.2f} | "
                    f"{test['perplexity'] / vanilla_perplexity:.2f} | "
                    f"{test['perplexity_after_prompt']:.2f} | {recgen['perplexity']:.2f} | "
                    f"{recgen['ratio_to_hiergen']:.2f} | "
                    f"{100 * agreement['token_agreement']:.1f} % | "
                    f"{agreement['mean_common_prefix']:.1f} |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eval_json", type=pathlib.Path)
    parser.add_argument("--recgen", action="store_true", help="the RecGen quality table")
    parser.add_argument("--vanilla-perplexity", type=float,
                        help="vanilla's test perplexity (default: the 'vanilla' model's)")
    parser.add_argument("--update", type=pathlib.Path, help="a Markdown file with the markers")
    args = parser.parse_args(argv)
    results = json.loads(args.eval_json.read_text())
    if args.recgen:
        vanilla = args.vanilla_perplexity or results.get("vanilla", {}).get("test", {}).get(
            "perplexity")
        if not vanilla:
            raise SystemExit("report: --recgen needs a 'vanilla' model or --vanilla-perplexity")
        text = recgen_table(results, vanilla)
    else:
        text = table(results)
    print(text)
    if args.update:
        begin, end = MARKERS[args.recgen]
        document = args.update.read_text()
        if document.count(begin) != 1 or document.count(end) != 1:
            raise SystemExit(f"report: {args.update} needs one {begin!r} and one {end!r} line")
        head, rest = document.split(begin)
        tail = rest.split(end)[1]
        args.update.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    main()
