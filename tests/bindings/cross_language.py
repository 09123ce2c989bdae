#!/usr/bin/env python3
"""Cross-language session states: every binding saves a state, every other one restores it.

    cross_language.py MODEL WORKDIR NAME=ARG|ARG|... [NAME=ARG|ARG|...]...

Each NAME=... is a language's binding test command (its arguments joined with '|'); it is run as
`COMMAND save MODEL STATE OUT` and `COMMAND restore MODEL STATE OUT`, where OUT receives the ids of
the 8 tokens that follow the state. A state restored in any language must continue exactly as in
the language that saved it, and all languages must agree (same model, prompt and sampler).
"""
import os
import subprocess
import sys

CONTINUATION = 8  # tokens each command writes after the state


def run(command, *args):
    result = subprocess.run(command + list(args), capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command + list(args))} failed ({result.returncode}):\n"
                         f"{result.stdout}{result.stderr}")


def read_continuation(path, command):
    """The token ids a command wrote: exactly CONTINUATION of them (an empty or short file would
    make every comparison below pass vacuously)."""
    with open(path) as f:
        words = f.read().split()
    if len(words) != CONTINUATION or not all(w.isdigit() for w in words):
        raise SystemExit(f"{' '.join(command)} wrote {words!r} to {path}, not {CONTINUATION} "
                         f"token ids")
    return words


def main(argv):
    model, workdir = argv[1], argv[2]
    os.makedirs(workdir, exist_ok=True)
    languages = dict(spec.split("=", 1) for spec in argv[3:])
    commands = {name: command.split("|") for name, command in languages.items()}
    if len(commands) < 2:
        raise SystemExit("cross_language.py: needs at least two languages")

    saved = {}
    for name, command in commands.items():
        state = os.path.join(workdir, f"{name}.state")
        out = os.path.join(workdir, f"{name}.saved")
        run(command, "save", model, state, out)
        saved[name] = (state, read_continuation(out, command))
        print(f"{name} saved: {' '.join(saved[name][1])}")

    failures = []
    reference_name, (_, reference) = next(iter(saved.items()))
    for name, (_, continuation) in saved.items():
        if continuation != reference:
            failures.append(f"{name} continues with {continuation}, "
                            f"{reference_name} with {reference}")
    for saver, (state, expected) in saved.items():
        for restorer, command in commands.items():
            if restorer == saver:
                continue
            out = os.path.join(workdir, f"{saver}-to-{restorer}.restored")
            run(command, "restore", model, state, out)
            got = read_continuation(out, command)
            verdict = "ok" if got == expected else "MISMATCH"
            print(f"{verdict}: saved by {saver}, restored by {restorer}: {' '.join(got)}")
            if got != expected:
                failures.append(f"{saver} -> {restorer}: {got} != {expected}")
    if failures:
        raise SystemExit("\n".join(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
