"""The torch check at import (docs/python.md, "What is checked at import").

An extension built with the libtorch integration links the libtorch of one torch (the one the
build's interpreter imported: _build_info.torch_version). Loading it into a process that imports
another torch would put two libtorch builds in one process, so:

- check_before_load(), from modelmem/__init__.py before the extension is loaded: the torch this
  interpreter would import is found without importing it (its torch/version.py) or taken from
  sys.modules when already imported; another version is an ImportError naming both versions.
  No torch at all is not an error: the extension loads the libtorch it was linked against and
  only modelmem.torch then needs torch.
- check_loaded(torch), from modelmem/torch.py once torch is imported: the same version and the
  same C++ ABI (torch._C._GLIBCXX_USE_CXX11_ABI).
"""

import importlib.util
import os
import re
import sys

from . import _build_info

_VERSION_LINE = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.M)


def _torch_here():
    """(version, path) of the torch this interpreter imports, without importing it; None if none."""
    mod = sys.modules.get("torch")
    if mod is not None and hasattr(mod, "__version__"):
        return str(mod.__version__), getattr(mod, "__file__", None) or "torch"
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for d in spec.submodule_search_locations or ():
        try:
            with open(os.path.join(d, "version.py"), encoding="utf-8") as f:
                m = _VERSION_LINE.search(f.read())
        except OSError:
            continue
        if m:
            return m.group(1), os.path.join(d, "__init__.py")
    return "of unknown version", spec.origin or "torch"


def _abi_name(abi):
    return {True: "the C++11 ABI", False: "the pre-C++11 ABI"}.get(abi, "an unknown C++ ABI")


def _mismatch(found_version, found_path, found_abi=None):
    from . import __version__
    built = f"PyTorch {_build_info.torch_version}"
    if found_abi is not None:
        built += f" ({_abi_name(_build_info.torch_cxx11_abi)})"
        found = f"PyTorch {found_version} ({_abi_name(found_abi)}, {found_path})"
    else:
        found = f"PyTorch {found_version} ({found_path})"
    return ImportError(
        f"modelmem {__version__} was built against {built} but this interpreter "
        f"({sys.executable}) has {found}: its libtorch integration cannot share a process with "
        f"another libtorch. Rebuild it here: pip install --no-build-isolation --force-reinstall "
        f"--no-deps <modelmem source folder>")


def check_before_load():
    if _build_info.torch_version is None:
        return
    here = _torch_here()
    if here is None:
        return
    version, path = here
    if version != _build_info.torch_version:
        raise _mismatch(version, path)
    mod = sys.modules.get("torch")
    if mod is not None:
        check_loaded(mod)


def check_loaded(torch):
    if _build_info.torch_version is None:
        return
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    version = str(torch.__version__)
    if version != _build_info.torch_version or (
            _build_info.torch_cxx11_abi is not None and abi is not None and
            bool(abi) != _build_info.torch_cxx11_abi):
        raise _mismatch(version, getattr(torch, "__file__", "torch"), found_abi=abi)
