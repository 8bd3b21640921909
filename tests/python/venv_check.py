"""The package as a user installs it (CTest python_venv_install): a venv with
--system-site-packages seeing the project environment (torch 2.x, pytest, build), `pip install
--no-build-isolation` of the source folder into it, offline (--no-index), then the Python tests
run against that installation from a folder outside the source tree, then `pip uninstall`, which
must leave nothing of modelmem behind. Then the wheel `python3 -m build --wheel --no-isolation`
makes (reusing the same CMake tree, so only packaging runs again) goes into a second venv, where
test_install.py passes (the package's layout, the entry point, the torch check, a plan and
use_cpu_allocator from outside the source tree), and is uninstalled the same way.

    python3 tests/python/venv_check.py --source SRC --work DIR [--build-type T] [--cmake-args A]
                                       [--cmake-build-dir DIR]
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    t = time.monotonic()
    r = subprocess.run(cmd, **kw)
    print(f"  ({time.monotonic() - t:.1f} s, exit {r.returncode})", flush=True)
    if r.returncode != 0:
        sys.exit(f"venv_check: failed: {' '.join(cmd)}")
    return r


def make_venv(path):
    shutil.rmtree(path, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--system-site-packages", path])
    py = os.path.join(path, "bin", "python")
    # Run from the project environment (a venv: torch 2.x, pytest, build), the new venv's
    # system site is Debian's, not that environment's: a .pth file makes the environment's
    # packages visible after the venv's own, as a user's venv would have them installed.
    if sys.prefix != sys.base_prefix:
        import sysconfig
        with open(os.path.join(site_packages(py), "_modelmem_project_env.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")
    return py


def site_packages(py):
    return subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def check_installed(py, venv, source):
    site = site_packages(py)
    pkg = os.path.join(site, "modelmem")
    for rel in ("__init__.py", "__init__.pyi", "torch.pyi", "py.typed", "_build_info.py",
                "bin/modelmem", "lib/libmodelmem_preload.so", "lib/libmodelmem_npu_alloc.so"):
        p = os.path.join(pkg, rel)
        if not os.path.isfile(p) or os.path.islink(p):
            sys.exit(f"venv_check: {p} is missing from the installed package (or is a link)")
    if not glob.glob(os.path.join(pkg, "_modelmem.*.so")):
        sys.exit(f"venv_check: no extension in {pkg}")
    if not os.path.exists(os.path.join(venv, "bin", "modelmem")):
        sys.exit("venv_check: the modelmem console entry point is missing")
    # Nothing in the installed package may point back into the source or build trees.
    trees = [os.path.join(source, "python") + os.sep, os.environ["MODELMEM_PY_BUILD_DIR"]]
    if os.environ.get("MODELMEM_CMAKE_BUILD_DIR"):
        trees.append(os.environ["MODELMEM_CMAKE_BUILD_DIR"])
    for tree in trees:
        r = subprocess.run(["grep", "-rl", "--exclude=*.so", "--exclude=*.pyc",
                            "--exclude=modelmem", tree, pkg], capture_output=True, text=True)
        if r.stdout.strip():
            sys.exit(f"venv_check: installed files name {tree}: {r.stdout.strip()}")
    return site


def run_tests(py, venv, source, cwd, only=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MODELMEM_BINARY_DIR")}
    env.update(MODELMEM_INSTALLED="1", MODELMEM_SOURCE_DIR=source,
               PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""))
    run([py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         os.path.join(source, "tests", "python", only or "")], cwd=cwd, env=env)


def uninstall(py, venv, site):
    run([py, "-m", "pip", "uninstall", "-y", "modelmem"])
    left = glob.glob(os.path.join(site, "modelmem*")) + glob.glob(
        os.path.join(venv, "bin", "modelmem"))
    if left:
        sys.exit(f"venv_check: pip uninstall left {left}")
    r = subprocess.run([py, "-c", "import modelmem"], capture_output=True, text=True,
                       cwd=os.path.dirname(site))
    if r.returncode == 0 or "ModuleNotFoundError" not in r.stderr:
        sys.exit(f"venv_check: modelmem still importable after uninstall: {r.stderr}")
    print(f"uninstalled: nothing of modelmem left in {site}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--build-type", default="RelWithDebInfo")
    ap.add_argument("--cmake-args", default="")
    ap.add_argument("--cmake-build-dir", default="",
                    help="the CMake tree of the package build (default: in --work)")
    a = ap.parse_args()
    source = os.path.abspath(a.source)
    work = os.path.abspath(a.work)
    if work.startswith(source + os.sep) and not work.startswith(
            os.path.join(source, "build")):
        sys.exit("venv_check: --work must be outside the source tree (or in a build folder)")
    os.makedirs(work, exist_ok=True)
    os.environ.update(MODELMEM_PY_BUILD_DIR=os.path.join(work, "pip-build"),
                      MODELMEM_BUILD_TYPE=a.build_type, MODELMEM_CMAKE_ARGS=a.cmake_args,
                      PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if a.cmake_build_dir:
        os.environ["MODELMEM_CMAKE_BUILD_DIR"] = os.path.abspath(a.cmake_build_dir)
    tests_cwd = os.path.join(work, "run")
    os.makedirs(tests_cwd, exist_ok=True)

    print("== pip install --no-build-isolation into a venv", flush=True)
    venv = os.path.join(work, "venv")
    py = make_venv(venv)
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-cache-dir",
         source], cwd=tests_cwd)
    site = check_installed(py, venv, source)
    run_tests(py, venv, source, tests_cwd)
    uninstall(py, venv, site)

    print("== python3 -m build --wheel --no-isolation, installed into a second venv", flush=True)
    dist = os.path.join(work, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    run([py, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source],
        cwd=tests_cwd)
    wheels = glob.glob(os.path.join(dist, "modelmem-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"venv_check: expected one wheel in {dist}, found {wheels}")
    venv2 = os.path.join(work, "venv-wheel")
    py2 = make_venv(venv2)
    run([py2, "-m", "pip", "install", "--no-deps", "--no-cache-dir", wheels[0]], cwd=tests_cwd)
    site2 = check_installed(py2, venv2, source)
    # The same build as the pip installation: its own checks (layout, entry point, torch check,
    # plan and use_cpu_allocator from outside the source tree), not the whole suite again.
    run_tests(py2, venv2, source, tests_cwd, only="test_install.py")
    uninstall(py2, venv2, site2)
    print("venv_check: passed", flush=True)


if __name__ == "__main__":
    main()
