"""setuptools glue for pyproject.toml: build_ext runs this project's CMake build.

The build is for the interpreter running it (sys.executable) and, when that interpreter can
import torch, for that torch: its TorchConfig.cmake (torch.utils.cmake_prefix_path, or beside the
libtorch it loads, as Debian's python3-torch has it) and its version and C++ ABI, which the
package checks at import. Without torch the package is built without the libtorch integration
and modelmem.torch.use_cpu_allocator says so. CMake builds only the target modelmem_wheel (the
extension, the modelmem tool, the LD_PRELOAD library and the pluggable allocator libraries) and
installs its component `wheel` into the package folder; setuptools adds every pure Python
module, stub and subpackage of python/modelmem.

Environment (all optional): MODELMEM_CMAKE_ARGS (more -D options), MODELMEM_BUILD_TYPE
(default Release), MODELMEM_PY_BUILD_DIR (setuptools' build folder, default build-python/; the
CMake tree is kept there, so a second install only rebuilds what changed), MODELMEM_JOBS
(default: the number of CPUs), MODELMEM_CMAKE_BUILD_DIR (the CMake tree itself; a sibling of an
existing build folder compiles with the same relative paths, so ccache finds its objects). A
compiler cache (ccache on PATH) is used when present.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = os.environ.get("MODELMEM_PY_BUILD_DIR") or os.path.join(HERE, "build-python")

# Run in the interpreter being built for, outside pip's build isolation (which hides the
# environment's own packages): the torch it imports, and where that torch's CMake package is.
TORCH_PROBE = r"""
import json, os, sys
try:
    import torch, torch.utils
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"})); sys.exit(0)
dirs = [os.path.join(torch.utils.cmake_prefix_path, "Torch")]
# Debian's python3-torch names a folder it does not ship; its TorchConfig.cmake (libtorch-dev)
# lies beside the libc10.so this torch has loaded.
with open("/proc/self/maps") as maps:
    for line in maps:
        path = line.split()[-1]
        if os.path.basename(path).startswith("libc10.so"):
            dirs.append(os.path.join(os.path.dirname(path), "cmake", "Torch"))
            break
found = [d for d in dirs if os.path.exists(os.path.join(d, "TorchConfig.cmake"))]
print(json.dumps({"version": torch.__version__, "abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
                  "file": torch.__file__, "dir": found[0] if found else None, "looked": dirs}))
"""


def probe_torch():
    env = dict(os.environ)
    # pip's isolated build environment puts its own site folder first on PYTHONPATH.
    if "pip-build-env" in env.get("PYTHONPATH", ""):
        env.pop("PYTHONPATH")
        env.pop("PYTHONNOUSERSITE", None)
    r = subprocess.run([sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True,
                       env=env, check=False)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"the torch probe failed: {r.stderr.strip()[-500:]}"}


def torch_cmake_args():
    if os.environ.get("MODELMEM_TORCH", "").upper() in ("0", "OFF", "NO"):
        return ["-DMODELMEM_TORCH=OFF",
                "-DMODELMEM_WITHOUT_TORCH_REASON=built with MODELMEM_TORCH=OFF"]
    t = probe_torch()
    if "error" in t:
        reason = f"{sys.executable} could not import torch when modelmem was built ({t['error']})"
        print(f"modelmem: {reason}: building without the libtorch integration")
        return ["-DMODELMEM_TORCH=OFF", f"-DMODELMEM_WITHOUT_TORCH_REASON={reason}"]
    if t["dir"] is None:
        reason = (f"torch {t['version']} ({t['file']}) has no TorchConfig.cmake (looked in "
                  f"{', '.join(t['looked'])}; Debian: apt-get install libtorch-dev)")
        print(f"modelmem: {reason}: building without the libtorch integration")
        return ["-DMODELMEM_TORCH=OFF", f"-DMODELMEM_WITHOUT_TORCH_REASON={reason}"]
    print(f"modelmem: the libtorch integration is built against torch {t['version']} "
          f"({t['file']}, CMake package {t['dir']})")
    return ["-DMODELMEM_TORCH=ON", f"-DTorch_DIR={t['dir']}",
            f"-DMODELMEM_TORCH_VERSION={t['version']}",
            f"-DMODELMEM_TORCH_CXX11_ABI={'ON' if t['abi'] else 'OFF'}"]


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the CMake project, then installs its `wheel` component."""

    def run(self):
        build_dir = os.environ.get("MODELMEM_CMAKE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        os.makedirs(build_dir, exist_ok=True)
        args = [
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('MODELMEM_BUILD_TYPE', 'Release')}",
            "-DCMAKE_INSTALL_LIBDIR=lib",  # the tool finds the preload in bin/../lib
            "-DMODELMEM_WHEEL=ON", "-DMODELMEM_PYTHON=ON",
            "-DMODELMEM_TESTS=OFF", "-DMODELMEM_BENCH=OFF", "-DMODELMEM_FUZZ=OFF",
        ]
        if shutil.which("ninja"):
            args.append("-GNinja")
        if shutil.which("ccache"):
            for lang in ("C", "CXX"):
                if not os.environ.get(f"CMAKE_{lang}_COMPILER_LAUNCHER"):
                    args.append(f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache")
        args += torch_cmake_args()
        args += shlex.split(os.environ.get("MODELMEM_CMAKE_ARGS", ""))
        jobs = os.environ.get("MODELMEM_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "-S", HERE, "-B", build_dir, *args], check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "modelmem_wheel", "-j", jobs],
                       check=True)
        out = os.path.abspath(self.build_lib)
        if self.inplace:
            raise SystemExit("modelmem: editable installs are not supported; use `pip install "
                             "--no-build-isolation .` (or PYTHONPATH=build/python after a CMake "
                             "build)")
        # Stripped: the symbol tables and debug information stay in the CMake tree.
        subprocess.run(["cmake", "--install", build_dir, "--component", "wheel", "--prefix", out,
                        "--strip"], check=True)

    def get_outputs(self):
        return []


os.makedirs(BUILD_BASE, exist_ok=True)
setup(
    ext_modules=[CMakeExtension("modelmem._modelmem")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
