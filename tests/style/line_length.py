#!/usr/bin/env python3
"""No source line is longer than .clang-format's ColumnLimit (ctest line_length).

    line_length.py --source-dir S

clang-format leaves comments and string literals that pass the limit alone (ReflowComments is
off), so this check measures every line of the C and C++ sources (and the SWIG interfaces) under
include/, src/, tests/ and bindings/, and of every example program under examples/, in characters.
"""
import argparse
import pathlib
import re
import sys

C_SOURCES = {".c", ".h", ".cpp", ".hpp", ".cu", ".cuh", ".i", ".swigcxx"}
EXAMPLES = C_SOURCES | {".java", ".cs", ".go", ".py"}
DIRECTORIES = {"include": C_SOURCES, "src": C_SOURCES, "tests": C_SOURCES,
               "bindings": C_SOURCES, "examples": EXAMPLES}


def column_limit(source_dir):
    text = (source_dir / ".clang-format").read_text(encoding="utf-8")
    match = re.search(r"^ColumnLimit:\s*(\d+)", text, re.MULTILINE)
    if not match:
        raise SystemExit(f"{source_dir / '.clang-format'} sets no ColumnLimit")
    return int(match.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=pathlib.Path, required=True)
    args = parser.parse_args()
    limit = column_limit(args.source_dir)
    checked = 0
    too_long = []
    for directory, suffixes in DIRECTORIES.items():
        for path in sorted((args.source_dir / directory).rglob("*")):
            if not path.is_file() or path.suffix not in suffixes:
                continue
            checked += 1
            text = path.read_text(encoding="utf-8")
            for number, line in enumerate(text.splitlines(), start=1):
                if len(line) > limit:
                    name = path.relative_to(args.source_dir)
                    too_long.append(f"{name}:{number}: {len(line)} characters (limit {limit})")
    for line in too_long:
        print(line, file=sys.stderr)
    if too_long:
        print(f"{len(too_long)} lines longer than {limit} characters", file=sys.stderr)
        return 1
    print(f"{checked} files, every line within {limit} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
