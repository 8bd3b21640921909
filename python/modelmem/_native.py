"""The native files the package carries, found relative to it (never through a build tree).

A wheel or `pip install` holds them in the package: the modelmem tool in modelmem/bin/, the
libraries a framework loads (the LD_PRELOAD library, the CUDA and NPU pluggable allocators) in
modelmem/lib/. The CMake build tree links the same names there. `cmake --install` puts the
libraries in PREFIX/lib beside PREFIX/lib/python3.X/dist-packages, which is looked at next."""

import os

from ._errors import UnsupportedError

HERE = os.path.dirname(os.path.abspath(__file__))

LIBRARIES = {
    "preload": ("libmodelmem_preload.so", "MODELMEM_PRELOAD"),
    "cuda": ("libmodelmem_cuda_alloc.so", "MODELMEM_CUDA_ALLOC_LIB"),
    "npu": ("libmodelmem_npu_alloc.so", "MODELMEM_NPU_ALLOC_LIB"),
}


def find_library(name, env):
    """The path of library `name`: $env when set (None if that file is missing), else the first of
    the package's lib/ folder, the installed prefix's library folder and the system's."""
    path = os.environ.get(env)
    if path:
        return path if os.path.exists(path) else None
    for d in (os.path.join(HERE, "lib"), os.path.join(HERE, "..", "..", ".."), "/usr/local/lib",
              "/usr/lib/x86_64-linux-gnu", "/usr/lib"):
        p = os.path.normpath(os.path.join(d, name))
        if os.path.exists(p):
            return p
    return None


def library_path(kind):
    """The path of one of modelmem's native libraries, for ctypes or a framework's pluggable
    allocator: "preload" (libmodelmem_preload.so), "cuda" (libmodelmem_cuda_alloc.so, only when
    built with the CUDA toolkit) or "npu" (libmodelmem_npu_alloc.so). Raises UnsupportedError
    when this package has no such library, ValueError for another name."""
    if kind not in LIBRARIES:
        raise ValueError(f"library_path: {kind!r} is not one of {', '.join(LIBRARIES)}")
    name, env = LIBRARIES[kind]
    path = find_library(name, env)
    if path is None:
        raise UnsupportedError(f"{name} is not part of this modelmem ({os.path.join(HERE, 'lib')}"
                               f"{'; built without the CUDA toolkit' if kind == 'cuda' else ''}); "
                               f"set {env} to its path")
    return path


def tool_path():
    """The modelmem command-line tool of this package (modelmem/bin/modelmem)."""
    return os.path.join(HERE, "bin", "modelmem")
