#!/usr/bin/env python3
"""The installed SDK seen from outside (ctest install_package).

    install_test.py --build-dir B --source-dir S --work-dir W --languages c,cpp,python,... \\
        --tool NAME=PATH ...

`cmake --install` into a scratch prefix, which is then copied to a directory outside the
repository and removed, so that only the copy can work. No installed file may name the build
tree, the source tree or the first prefix (RPATHs and archive members included), and the
library exports the functions of photon.h and nothing else (exported_symbols.py). Then, from
directories outside the repository, with an environment that names nothing of the build tree,
each language's example is built against the copy as a user would (C: pkg-config; C and C++:
find_package(photon); Python: the wheel in a fresh virtual environment; Java: the jar and pom
installed into a local Maven repository; C#: Photon.dll with mono; Go: the module through a
replace directive) and run on the installed model: callback, iterator, save, restore. They
sample with the same seed, so every language must print the same completion.

The GPU module: with --cuda (a CUDA build) lib/libphoton-cuda.so is installed and packed into
the wheel and the jar, and a model asked for "cuda" from the CLI, Python and Java finds it
without any environment variable: it loads, or fails naming the CUDA runtime, the driver or the
device, never the module. Without --cuda they all say that the module is missing.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import exported_symbols

PROMPT = "In the beginning"
TOKENS_PER_STEP = "8"
SUMMARY = re.compile(r"\[([0-9]+) tokens, (recgen|hiergen), state [0-9]+ bytes\]")


class Failure(Exception):
    pass


def run(command, cwd, env, timeout=600):
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise Failure(f"{' '.join(map(str, command))} failed ({result.returncode}) in {cwd}:\n"
                      f"{result.stdout}{result.stderr}")
    return result


CUDA_MODULE = "libphoton-cuda.so"
# How a failed GPU load starts its message when the module was found (photon_model_load).
FOUND_MODULE = ("no CUDA runtime", "no CUDA driver", "no CUDA device")


def check_layout(prefix, languages, cuda):
    expected = ["include/photon.h", "lib/libphoton.so.0", "lib/pkgconfig/photon.pc",
                "lib/cmake/photon/photonConfig.cmake", "bin/photon",
                "share/photon/models/photon-kjv.photon"]
    if cuda:
        expected.append(f"lib/{CUDA_MODULE}")
    per_language = {
        "python": ["share/photon/python"],
        "java": ["share/java/photon.jar", "share/java/photon.pom"],
        "csharp": ["lib/photon/csharp/Photon.dll", "lib/photon/csharp/libphoton_csharp.so"],
        "go": ["share/photon/go/go.mod", "share/photon/go/internal/native/photon.i"],
    }
    for language in languages:
        expected += per_language.get(language, [])
    missing = [path for path in expected if not (prefix / path).exists()]
    if missing:
        raise Failure(f"not installed under {prefix}: {missing}")
    packed = {"python": (list((prefix / "share/photon/python").glob("*.whl")),
                         f"photon/{CUDA_MODULE}"),
              "java": ([prefix / "share/java/photon.jar"], f"com/photon/native/{CUDA_MODULE}")}
    for language, (archives, member) in packed.items():
        if language not in languages:
            continue
        for archive in archives:
            with zipfile.ZipFile(archive) as contents:
                if (member in contents.namelist()) != cuda:
                    raise Failure(f"{archive} {'lacks' if cuda else 'has'} {member}")
    soname = run(["readelf", "-d", prefix / "lib/libphoton.so.0"], prefix, None).stdout
    if "Library soname: [libphoton.so.0]" not in soname:
        raise Failure(f"libphoton.so.0 lacks its SONAME:\n{soname}")


def check_exports(prefix, source_dir):
    """The installed library exports the functions of the installed photon.h and nothing else, and
    the CUDA module, where installed, its entry point alone."""
    api = exported_symbols.declared(prefix / "include/photon.h")
    problems = exported_symbols.problems(prefix / "lib/libphoton.so.0", api)
    module = prefix / "lib/libphoton-cuda.so"
    if module.exists():
        entry = exported_symbols.module_entry(source_dir / "src/backend/module.h")
        problems += exported_symbols.problems(module, entry, "module.h")
    if problems:
        raise Failure("\n".join(problems))


def contents(path):
    """(name, bytes) of a file and, for a zip (jar, wheel), of each of its members."""
    data = path.read_bytes()
    yield str(path), data
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                yield f"{path}!{name}", archive.read(name)


def check_relocatable(prefix, forbidden):
    """No installed file names a path of this build (RPATH, pkg-config, CMake files...)."""
    needles = [str(path).encode() for path in forbidden]
    for path in sorted(prefix.rglob("*")):
        if path.is_file() and not path.is_symlink():
            for name, data in contents(path):
                found = [needle.decode() for needle in needles if needle in data]
                if found:
                    raise Failure(f"{name} refers to {found}")


class Consumers:
    """Builds and runs each language's example against the installed copy."""

    def __init__(self, source_dir, prefix, outside, tools):
        self.examples = source_dir / "examples"
        self.consumer = source_dir / "tests/install/consumer"
        self.prefix = prefix
        self.outside = outside
        self.tools = tools
        self.model = prefix / "share/photon/models/photon-kjv.photon"
        home = outside / "home"
        home.mkdir()
        # Nothing of the build: system tools, a scratch home, one OpenMP thread (CI runs tests
        # side by side).
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                    "OMP_NUM_THREADS": "1", "TMPDIR": str(outside)}

    def app_dir(self, name, *sources):
        directory = self.outside / name
        directory.mkdir()
        for source in sources:
            shutil.copy(source, directory)
        return directory

    def stream(self, command, cwd, env=None):
        """Runs an example on the installed model; returns the completion it printed."""
        result = run(list(command) + [self.model, PROMPT, TOKENS_PER_STEP], cwd, env or self.env)
        summary = SUMMARY.search(result.stderr)
        if not result.stdout.startswith(PROMPT) or not summary:
            raise Failure(f"{command[0]} printed no completion and summary:\n"
                          f"{result.stdout}{result.stderr}")
        return result.stdout.strip()

    def gpu_answers(self, languages):
        """What a model asked for "cuda" says from the CLI, Python and Java: "device cuda:N" or
        the library's message."""
        answers = {}
        result = subprocess.run([self.prefix / "bin/photon", "score", "-m", self.model,
                                 "--tokens", "1,2", "--device", "cuda"], cwd=self.outside,
                                env=self.env, capture_output=True, text=True, timeout=600)
        answers["cli"] = "device cuda" if result.returncode == 0 else result.stderr.strip()
        if "python" in languages:
            script = ("import photon, sys\n"
                      "try:\n"
                      "    print('device', photon.Model(sys.argv[1], device='cuda').device)\n"
                      "except photon.PhotonError as error:\n"
                      "    print(error)\n")
            answers["python"] = run(["venv/bin/python", "-c", script, self.model],
                                    self.outside / "python", self.env).stdout.strip()
        if "java" in languages:
            app = self.app_dir("java-cuda", self.consumer / "CudaCheck.java")
            jar = self.prefix / "share/java/photon.jar"
            run([self.tools["javac"], "-Xlint:all", "-Werror", "-cp", jar, "-d", ".",
                 "CudaCheck.java"], app, self.env)
            answers["java"] = run([self.tools["java"], "-cp", f"{jar}:.", "CudaCheck",
                                   self.model], app, self.env).stdout.strip()
        return answers

    def c_pkg_config(self):
        app = self.app_dir("c-pkg-config", self.examples / "c/stream.c")
        env = dict(self.env, PKG_CONFIG_PATH=str(self.prefix / "lib/pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "photon"], app, env).stdout.split()
        libdir = run(["pkg-config", "--variable=libdir", "photon"], app, env).stdout.strip()
        run([self.tools["cc"], "-std=c11", "-Wall", "-Wextra", "-Werror", "stream.c", *flags,
             f"-Wl,-rpath,{libdir}", "-o", "stream"], app, env)
        return self.stream(["./stream"], app)

    def find_package(self):
        app = self.app_dir("find-package", self.consumer / "CMakeLists.txt",
                           self.examples / "c/stream.c", self.examples / "cpp/stream.cpp")
        run([self.tools["cmake"], "-S", ".", "-B", "build", "-G", self.tools["generator"],
             f"-DCMAKE_PREFIX_PATH={self.prefix}", f"-DCMAKE_C_COMPILER={self.tools['cc']}",
             f"-DCMAKE_CXX_COMPILER={self.tools['cxx']}"], app, self.env)
        run([self.tools["cmake"], "--build", "build"], app, self.env)
        return [self.stream([f"./build/{name}"], app) for name in ("stream_c", "stream_cpp")]

    def python(self):
        app = self.app_dir("python", self.examples / "python/stream.py")
        wheels = list((self.prefix / "share/photon/python").glob("*.whl"))
        if len(wheels) != 1:
            raise Failure(f"expected one wheel, found {wheels}")
        run([self.tools["python"], "-m", "venv", "venv"], app, self.env)
        run(["venv/bin/pip", "install", "--no-index", "--no-cache-dir", wheels[0]], app, self.env)
        check = ("import importlib.metadata, pathlib, photon; "
                 "assert importlib.metadata.version('photon-sdk') == photon.__version__; "
                 "package = pathlib.Path(photon.__file__).parent; "
                 "assert (package / '__init__.pyi').exists() and (package / 'py.typed').exists()")
        run(["venv/bin/python", "-c", check], app, self.env)
        return self.stream(["venv/bin/python", "stream.py"], app)

    def java(self):
        app = self.app_dir("java", self.examples / "java/Stream.java")
        # A local Maven repository; Maven's own plugins come from Debian's repository (offline).
        settings = app / "settings.xml"
        settings.write_text(
            f"<settings><localRepository>{app / 'm2'}</localRepository><mirrors><mirror>"
            "<id>debian</id><mirrorOf>*</mirrorOf><url>file:///usr/share/maven-repo</url>"
            "</mirror></mirrors></settings>\n")
        run([self.tools["mvn"], "-q", "-B", "-s", settings,
             "org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file",
             f"-Dfile={self.prefix / 'share/java/photon.jar'}",
             f"-DpomFile={self.prefix / 'share/java/photon.pom'}"], app, self.env)
        version = run([self.tools["python"], "-c", "import sys, xml.etree.ElementTree as t; "
                       "print(t.parse(sys.argv[1]).find('{*}version').text)",
                       self.prefix / "share/java/photon.pom"], app, self.env).stdout.strip()
        jar = app / f"m2/com/photon/photon/{version}/photon-{version}.jar"
        # README's route without Maven's install plugin (offline): Maven's local repository is
        # plain directories, and the two files go where install-file puts them.
        for installed, name in ((self.prefix / "share/java/photon.jar", f"photon-{version}.jar"),
                                (self.prefix / "share/java/photon.pom", f"photon-{version}.pom")):
            if (jar.parent / name).read_bytes() != installed.read_bytes():
                raise Failure(f"install-file did not put {installed} at {jar.parent / name}")
        run([self.tools["javac"], "-Xlint:all", "-Werror", "-cp", jar, "-d", ".", "Stream.java"],
            app, self.env)
        return self.stream([self.tools["java"], "-cp", f"{jar}:.", "Stream"], app)

    def csharp(self):
        app = self.app_dir("csharp", self.examples / "csharp/Stream.cs")
        assembly_dir = self.prefix / "lib/photon/csharp"
        run([self.tools["mcs"], "-warnaserror+", "-nologo", f"-r:{assembly_dir / 'Photon.dll'}",
             "-out:Stream.exe", "Stream.cs"], app, self.env)
        return self.stream([self.tools["mono"], "Stream.exe"], app,
                           dict(self.env, MONO_PATH=str(assembly_dir)))

    def go(self):
        app = self.app_dir("go", self.examples / "go/main.go")
        (app / "go.mod").write_text(
            "module example.com/stream\n\ngo 1.19\n\nrequire photon.sdk/photon v0.0.0\n\n"
            f"replace photon.sdk/photon => {self.prefix / 'share/photon/go'}\n")
        env = dict(self.env, GOCACHE=str(app / "cache"), GOPATH=str(app / "gopath"),
                   GOPROXY="off",
                   PKG_CONFIG_PATH=str(self.prefix / "lib/pkgconfig"),
                   CGO_LDFLAGS=f"-Wl,-rpath,{self.prefix / 'lib'}")
        run([self.tools["go"], "build", "-o", "stream", "."], app, env)
        return self.stream(["./stream"], app)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=pathlib.Path, required=True)
    parser.add_argument("--source-dir", type=pathlib.Path, required=True)
    parser.add_argument("--work-dir", type=pathlib.Path, required=True)
    parser.add_argument("--languages", required=True)
    parser.add_argument("--tool", action="append", default=[], help="NAME=PATH")
    parser.add_argument("--cuda", action="store_true", help="a build with the GPU module")
    args = parser.parse_args()
    tools = dict(tool.split("=", 1) for tool in args.tool)
    languages = args.languages.split(",")

    first_prefix = args.work_dir / "prefix"
    shutil.rmtree(first_prefix, ignore_errors=True)
    run([tools["cmake"], "--install", args.build_dir, "--prefix", first_prefix], args.work_dir,
        None)
    outside = pathlib.Path(tempfile.mkdtemp(prefix="photon-install-test-")).resolve()
    try:
        if outside.is_relative_to(args.source_dir.resolve()):
            raise Failure(f"{outside} is inside the repository: set TMPDIR elsewhere")
        prefix = outside / "photon"
        shutil.copytree(first_prefix, prefix, symlinks=True)
        shutil.rmtree(first_prefix)
        check_layout(prefix, languages, args.cuda)
        check_exports(prefix, args.source_dir)
        check_relocatable(prefix, [args.build_dir.resolve(), args.source_dir.resolve(),
                                   first_prefix.resolve()])
        print(f"installed, moved to {prefix}, no reference to the build, only photon.h's "
              "functions exported")

        consumers = Consumers(args.source_dir.resolve(), prefix, outside, tools)
        for value in consumers.env.values():
            if str(args.build_dir.resolve()) in value or str(args.source_dir.resolve()) in value:
                raise Failure(f"the environment names the build: {value}")
        completions = {"c (pkg-config)": consumers.c_pkg_config()}
        completions["c (find_package)"], completions["c++ (find_package)"] = \
            consumers.find_package()
        for language in ("python", "java", "csharp", "go"):
            if language in languages:
                completions[language] = getattr(consumers, language)()
        for name, completion in completions.items():
            print(f"{name}: {completion}")
        if len(set(completions.values())) != 1:
            raise Failure("the languages' completions differ (same model, prompt and seed)")

        for name, answer in consumers.gpu_answers(languages).items():
            print(f"{name} on cuda: {answer}")
            if args.cuda:
                found = answer.startswith("device cuda") or any(
                    what in answer for what in FOUND_MODULE)
            else:
                found = "no CUDA module" in answer
            if not found:
                raise Failure(f"{name}: a model on 'cuda' says {answer!r}; expected "
                              + ("the module to be found" if args.cuda else "'no CUDA module'"))
    except Failure as failure:
        print(f"install_test.py: {failure}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
