#!/usr/bin/env python3
"""Only the C API leaves libphoton (ctest library_exports_c_api_only; install_test.py runs the same
check on the installed library).

    exported_symbols.py --header include/photon.h LIBRARY... \
        [--module-header src/backend/module.h --module libphoton-cuda.so]

`nm -D --defined-only` of each library must list exactly the functions that photon.h declares
with PHOTON_API: a C++ name (photon::Session::~Session()), a symbol of a library linked in, or
an internal photon_ helper fails the check, and so does a declared function that is not
exported. The CUDA module, when given, must export its entry point (PHOTON_CUDA_MODULE_ENTRY of
module.h) and nothing else.
"""
import argparse
import re
import subprocess
import sys

DECLARATION = re.compile(r"PHOTON_API\b[^;]*?\b(photon_\w+)\s*\(")


def declared(header):
    """The functions photon.h declares with PHOTON_API (preprocessor lines left out)."""
    with open(header, encoding="utf-8") as file:
        text = "".join(line for line in file if not line.lstrip().startswith("#"))
    return set(DECLARATION.findall(text))


def exported(library):
    """The names of the library's defined dynamic symbols, without their version suffixes."""
    result = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"nm -D --defined-only {library} failed:\n{result.stderr}")
    names = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.add(fields[2].split("@")[0])
    return names


def module_entry(module_header):
    """The CUDA module's entry point, as module.h names it."""
    with open(module_header, encoding="utf-8") as file:
        match = re.search(r'#define PHOTON_CUDA_MODULE_ENTRY "(\w+)"', file.read())
    if not match:
        raise SystemExit(f"{module_header} defines no PHOTON_CUDA_MODULE_ENTRY")
    return {match.group(1)}


def problems(library, api, source="photon.h"):
    """What is wrong with one library's exports, as lines of text (none when it is right)."""
    names = exported(library)
    lines = []
    foreign = sorted(name for name in names if not name.startswith("photon_"))
    if foreign:
        lines.append(f"{library} exports {len(foreign)} symbols outside photon_*, e.g. "
                     f"{', '.join(foreign[:10])}")
    internal = sorted(name for name in names if name.startswith("photon_") and name not in api)
    if internal:
        lines.append(f"{library} exports photon_* symbols that {source} does not declare: "
                     f"{', '.join(internal)}")
    missing = sorted(api - names)
    if missing:
        lines.append(f"{library} does not export what {source} declares: {', '.join(missing)}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--header", required=True)
    parser.add_argument("--module-header")
    parser.add_argument("--module")
    parser.add_argument("libraries", nargs="+")
    args = parser.parse_args()
    api = declared(args.header)
    if not api:
        raise SystemExit(f"{args.header} declares no PHOTON_API function")
    failures = [line for library in args.libraries for line in problems(library, api)]
    if args.module:
        failures += problems(args.module, module_entry(args.module_header), "module.h")
    for line in failures:
        print(line, file=sys.stderr)
    if failures:
        return 1
    for library in args.libraries:
        print(f"{library}: exports the {len(api)} functions of photon.h and nothing else")
    if args.module:
        print(f"{args.module}: exports its entry point and nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())
