"""The quality table of docs/quality.md, in Markdown, from training.evaluate's JSON.

    PYTHONPATH=python:. /usr/bin/python3 -m training.report out/train/eval.json \
        [--update docs/quality.md]

prints the table; --update also writes it between the BEGIN and END marker lines of the file.
"""

import argparse
import json
import pathlib

BEGIN, END = "<!-- quality-table: begin (training.report) -->", "<!-- quality-table: end -->"

ORDER = ["photon-a0", "photon-a03", "photon-a03-sg", "block", "vanilla", "photon-kjv"]
NAMES = {"photon-a0": "PHOTON L=2 (C 4x4), alpha 0", "photon-a03": "PHOTON L=2 (C 4x4), alpha 0.3",
         "photon-a03-sg": "PHOTON L=2 (C 4x4), alpha 0.3, target detached",
         "block": "Block (PHOTON L=1, C 4)", "vanilla": "vanilla",
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="training.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eval_json", type=pathlib.Path)
    parser.add_argument("--update", type=pathlib.Path, help="a Markdown file with the markers")
    args = parser.parse_args(argv)
    text = table(json.loads(args.eval_json.read_text()))
    print(text)
    if args.update:
        document = args.update.read_text()
        if document.count(BEGIN) != 1 or document.count(END) != 1:
            raise SystemExit(f"report: {args.update} needs one {BEGIN!r} and one {END!r} line")
        head, rest = document.split(BEGIN)
        tail = rest.split(END)[1]
        args.update.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
