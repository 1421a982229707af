"""The PEP 517 build backend of the clustersim Python package (pyproject.toml names it with
`backend-path`, so pip finds it in the source tree and needs nothing from a package index).

`pip install .` builds the compiled module `_clustersim` with CMake (only that target and the
libraries it links) and writes a wheel holding the package (clustersim/), the module and the
bundled data the simulator reads (workloads/, topologies/ and the validation suite the HTML
report scores against, under clustersim/data/). `pip install -e .` builds the module, copies it
beside clustersim/__init__.py in the source tree, and installs a finder that imports clustersim
from the source tree, so edits to the pure-Python half take effect on the next import.

Standard library only. The build folder:
  CLUSTERSIM_BUILD_DIR     an existing or new CMake build folder to build `_clustersim` in: a tree
                           configured by tools/build.sh is reused as it is (ccache and ninja then
                           make this a matter of seconds), so CI checks the wheel without building
                           the simulator twice;
  config_settings          `pip install . --config-settings build-dir=DIR` does the same;
  otherwise                <source>/build/pip-<python tag>, configured Release without tests and
                           benchmarks (the first build takes minutes; later ones reuse it).
CMAKE_BUILD_PARALLEL_LEVEL sets the number of compile jobs (default: the number of CPUs).
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "clustersim"
# Folders of the source tree shipped as clustersim/data/<folder> (api::data_root reads them
# there, through CLUSTERSIM_DATA, which clustersim/__init__.py sets for an installed package).
DATA = ("workloads", "topologies", os.path.join("tests", "validation"))
# What the validation suite's folder holds that the simulator never reads.
DATA_SKIP = (".cpp", ".py", ".pyc")


def version():
    """The project's version, from the top-level CMakeLists.txt (`project(clustersim VERSION x)`),
    the one place it is written."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(r"project\(\s*clustersim\s+VERSION\s+([0-9.]+)", f.read())
    if not found:
        raise RuntimeError("no `project(clustersim VERSION ...)` in CMakeLists.txt")
    return found.group(1)


def _tag():
    """The wheel tag of the running interpreter: cp311-cp311-linux_x86_64."""
    impl = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (impl, impl, platform)


def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _metadata():
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: A discrete-event simulator of GPU training clusters\n"
            "Requires-Python: >=3.9\n" % (NAME, version()))


def _build_dir(config_settings):
    chosen = os.environ.get("CLUSTERSIM_BUILD_DIR") or (config_settings or {}).get("build-dir")
    if chosen:
        return os.path.abspath(chosen)
    return os.path.join(ROOT, "build", "pip-" + _tag().split("-")[0])


def _run(command):
    print("clustersim_build: " + " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=sys.stderr)


def _build_module(config_settings):
    """Builds `_clustersim` for this interpreter; returns the path of the module file."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("clustersim needs CMake and a C++20 compiler to build: "
                           "tools/install-deps.sh installs them (docs/python.md)")
    build = _build_dir(config_settings)
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        command = [cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                   "-DCLUSTERSIM_BUILD_TESTS=OFF", "-DCLUSTERSIM_BUILD_BENCHMARKS=OFF",
                   "-DCLUSTERSIM_MPI=OFF", "-DCLUSTERSIM_PYTHON_IN_SOURCE=OFF",
                   "-DPython3_EXECUTABLE=" + sys.executable]
        if shutil.which("ninja"):
            command += ["-G", "Ninja"]
        if shutil.which("ccache"):
            command += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        _run(command)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run([cmake, "--build", build, "--target", "_clustersim", "--parallel", jobs])
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    module = os.path.join(build, "python", NAME, "_clustersim" + suffix)
    if not os.path.isfile(module):
        built = os.listdir(os.path.join(build, "python", NAME))
        raise RuntimeError("%s has no %s (it has %s): the build folder was configured for "
                           "another Python than %s; name another CLUSTERSIM_BUILD_DIR" %
                           (build, "_clustersim" + suffix, ", ".join(built) or "nothing",
                            sys.executable))
    return module


class _Wheel:
    """A wheel being written: each file is added with its RECORD line."""

    def __init__(self, directory):
        self.name = "%s-%s-%s.whl" % (NAME, version(), _tag())
        self.zip = zipfile.ZipFile(os.path.join(directory, self.name), "w",
                                   zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        self.record.append("%s,sha256=%s,%d" % (arcname, digest.decode("ascii"), len(data)))

    def add_file(self, arcname, path):
        with open(path, "rb") as f:
            self.add(arcname, f.read())

    def close(self):
        info = _dist_info()
        self.add(info + "/METADATA", _metadata())
        self.add(info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: clustersim_build\n"
                 "Root-Is-Purelib: false\nTag: %s\n" % _tag())
        self.add(info + "/top_level.txt", NAME + "\n")
        self.record.append(info + "/RECORD,,")
        self.zip.writestr(zipfile.ZipInfo(info + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                          "\n".join(self.record) + "\n")
        self.zip.close()
        return self.name


def _package_files():
    """(path in the wheel, path on disk) of the pure-Python package, in name order."""
    folder = os.path.join(ROOT, NAME)
    for name in sorted(os.listdir(folder)):
        if name.endswith((".py", ".pyi")) or name == "py.typed":
            yield NAME + "/" + name, os.path.join(folder, name)


def _data_files():
    for top in DATA:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(DATA_SKIP):
                    continue
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
                yield NAME + "/data/" + relative, path


# PEP 517 hooks. Nothing is required from an index: pip's isolated build environment stays empty.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    module = _build_module(config_settings)
    wheel = _Wheel(wheel_directory)
    for arcname, path in _package_files():
        wheel.add_file(arcname, path)
    wheel.add_file(NAME + "/" + os.path.basename(module), module)
    for arcname, path in _data_files():
        wheel.add_file(arcname, path)
    return wheel.close()


# An editable install: a finder that maps `clustersim` (and only it) to the source tree, so the
# rest of the repository root (tests/, tools/, ...) does not become importable.
_EDITABLE_FINDER = '''"""Imports clustersim from its source tree (pip install -e)."""
import importlib.abc
import importlib.util
import os
import sys

PACKAGE = %r


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "clustersim":
            return None
        return importlib.util.spec_from_file_location(
            name, os.path.join(PACKAGE, "__init__.py"), submodule_search_locations=[PACKAGE])


def install():
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
'''


def _same_bytes(a, b):
    if not os.path.isfile(b) or os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    module = _build_module(config_settings)
    package = os.path.join(ROOT, NAME)
    target = os.path.join(package, os.path.basename(module))
    if not _same_bytes(module, target):
        # Copied under a temporary name and renamed, as the CMake build does: a Python that has
        # the old module loaded keeps it intact.
        fd, temporary = tempfile.mkstemp(dir=package, prefix=".", suffix=".tmp")
        os.close(fd)
        shutil.copyfile(module, temporary)
        os.replace(temporary, target)
    wheel = _Wheel(wheel_directory)
    wheel.add("__editable___clustersim_finder.py", _EDITABLE_FINDER % package)
    wheel.add("__editable___clustersim.pth",
              "import __editable___clustersim_finder; __editable___clustersim_finder.install()\n")
    return wheel.close()


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("clustersim has no source distribution: install from a clone "
                       "(pip install /path/to/clustersim)")
