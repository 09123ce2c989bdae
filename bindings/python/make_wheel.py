#!/usr/bin/env python3
"""Packs the built package photon (its directory, native libraries included) into a wheel for
the running interpreter, without anything from PyPI: a wheel is a zip file with a .dist-info
directory (METADATA, WHEEL, RECORD; PEP 427).

    make_wheel.py --version 0.1.0 --name          prints the wheel's file name
    make_wheel.py --version 0.1.0 PACKAGE_DIR OUTPUT_WHEEL

The zip is reproducible: entries are sorted and carry a fixed date.
"""
import argparse
import base64
import hashlib
import pathlib
import sys
import sysconfig
import zipfile

DISTRIBUTION = "photon_sdk"  # pip name photon-sdk; the import name is photon
SUMMARY = "PHOTON hierarchical language models: the Python binding of the PHOTON SDK"
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def tag():
    """The interpreter, ABI and platform this build of the extension runs on."""
    interpreter = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{interpreter}-{interpreter}{sys.abiflags}-{platform}"


def wheel_name(version):
    return f"{DISTRIBUTION}-{version}-{tag()}.whl"


def digest(data):
    encoded = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + encoded.decode()


def package_files(package_dir):
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path, "photon/" + path.relative_to(package_dir).as_posix()


def write_wheel(version, package_dir, output):
    info = f"{DISTRIBUTION}-{version}.dist-info"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    metadata = (f"Metadata-Version: 2.1\nName: photon-sdk\nVersion: {version}\n"
                f"Summary: {SUMMARY}\nRequires-Python: =={python}.*\n")
    wheel = (f"Wheel-Version: 1.0\nGenerator: photon make_wheel.py\nRoot-Is-Purelib: false\n"
             f"Tag: {tag()}\n")
    entries = [(arcname, path.read_bytes(), path.suffix == ".so" or ".so." in path.name)
               for path, arcname in package_files(package_dir)]
    if not any(name.startswith("photon/_native.") for name, _, _ in entries):
        raise SystemExit(f"make_wheel.py: no extension module in {package_dir}")
    entries += [(f"{info}/METADATA", metadata.encode(), False),
                (f"{info}/WHEEL", wheel.encode(), False),
                (f"{info}/top_level.txt", b"photon\n", False)]
    record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data, _ in entries)
    record += f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), False))

    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in entries:
            entry = zipfile.ZipInfo(name, FIXED_DATE)
            entry.external_attr = (0o755 if executable else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    partial.replace(output)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--name", action="store_true", help="print the wheel's file name")
    parser.add_argument("package_dir", nargs="?", type=pathlib.Path)
    parser.add_argument("output", nargs="?", type=pathlib.Path)
    args = parser.parse_args()
    if args.name:
        print(wheel_name(args.version))
    elif args.package_dir and args.output:
        write_wheel(args.version, args.package_dir, args.output)
    else:
        parser.error("give --name, or PACKAGE_DIR and OUTPUT")


if __name__ == "__main__":
    main()
