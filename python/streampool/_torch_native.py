"""The native PyTorch allocator's library (src/torch/, docs/torch.md): found, or built on first
use against the torch that is imported.

Order: $STREAMPOOL_TORCH_NATIVE (a path to libstreampool_torch.so) when set; else a build of this
package's sources for this torch, this streampool and these sources, kept in a cache folder
($STREAMPOOL_TORCH_NATIVE_CACHE, else torch's extension folder: $TORCH_EXTENSIONS_DIR or
~/.cache/torch_extensions) and reused by later processes; else it is built there now with torch's
own JIT build (torch.utils.cpp_extension: the compiler flags and libraries of the imported torch,
ninja). A build needs a C++20 compiler and CUDA's runtime headers: $CUDA_HOME's (a toolkit), or
PyPI's nvidia-cuda-runtime and nvidia-cuda-crt wheels beside torch.

Every failure raises Unavailable with the reason, for streampool.torch.enable() to name when it
falls back to the plug-in.
"""

import ctypes
import glob
import hashlib
import os
from typing import List

from . import _capi

# The sources of the native allocator, in the package (a wheel's copy, CMake's SKBUILD install)
# or in this repository's tree when the package is run from python/.
# The file that says a folder holds the sources; all of the folder's *.cpp and *.hpp are built.
_MAIN = "native_allocator.cpp"


class Unavailable(Exception):
    """The native allocator cannot be had here; str() says why."""


def _source_dirs():
    """(sources folder, include folder) of the native allocator."""
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "_torch_native")
    if os.path.isfile(os.path.join(packaged, _MAIN)):
        return packaged, packaged
    root = os.path.dirname(os.path.dirname(here))
    tree = os.path.join(root, "src", "torch")
    if os.path.isfile(os.path.join(tree, _MAIN)):
        return tree, os.path.join(root, "include")
    raise Unavailable("its sources are not in this installation (neither "
                      f"{packaged} nor a source tree's src/torch/)")


def _library_path() -> str:
    """libstreampool as loaded by this package: the native allocator links to the same file."""
    name = _capi.library_path()
    if not name or not os.path.isabs(name):
        raise Unavailable(f"libstreampool was loaded as {name!r}, not from a path to link with")
    return name


def _cuda_dirs(torch_dir: str) -> List[str]:
    """Folders with CUDA's runtime headers: a toolkit's ($CUDA_HOME, /usr/local/cuda) or PyPI's
    nvidia wheels beside torch."""
    out = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")):
            out.append(home)
    site = os.path.dirname(torch_dir)
    for inc in sorted(glob.glob(os.path.join(site, "nvidia", "*", "include", "cuda_runtime_api.h"))
                      + glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "include",
                                               "cuda_runtime_api.h"))):
        out.append(os.path.dirname(os.path.dirname(inc)))
    return out


# A toolchain that links its C++ runtime statically (GCC under /opt on some GPU machines) would
# export that copy's std::ostream and locale symbols from the extension; torch's process already
# has the system's libstdc++, and calls that bind half to one copy and half to the other crash
# (seen on an out-of-memory message). --exclude-libs keeps a static runtime's symbols private.
_CFLAGS = ["-std=c++20", "-O2", "-fvisibility=hidden"]
_LDFLAGS = ["-Wl,--exclude-libs,ALL"]


def _key(torch, files) -> str:
    """What the build depends on: torch's version and CUDA, this library, the flags, the sources'
    bytes."""
    h = hashlib.sha256()
    h.update(f"{torch.__version__} {torch.version.cuda} {_CFLAGS} {_LDFLAGS}".encode())
    h.update(_library_path().encode())
    for path in files:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def library(verbose: bool = False) -> str:
    """The path of a libstreampool_torch.so for the imported torch (built now if need be)."""
    env = os.environ.get("STREAMPOOL_TORCH_NATIVE")
    if env:
        if not os.path.isfile(env):
            raise Unavailable(f"STREAMPOOL_TORCH_NATIVE={env} is not a file")
        return env
    import torch  # type: ignore[import-not-found]

    src, inc = _source_dirs()
    sources = sorted(glob.glob(os.path.join(src, "*.cpp")))
    headers = sorted(glob.glob(os.path.join(src, "*.hpp"))) + [
        os.path.join(inc, "streampool.h"), os.path.join(inc, "streampool", "limits.h")]
    torch_dir = os.path.dirname(torch.__file__)
    name = "streampool_torch_" + _key(torch, sources + headers)
    cache = os.environ.get("STREAMPOOL_TORCH_NATIVE_CACHE") or os.path.join(
        os.environ.get("TORCH_EXTENSIONS_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions"), "streampool")
    build = os.path.join(cache, name)
    built = os.path.join(build, name + ".so")
    if os.path.isfile(built):
        return built
    cuda = _cuda_dirs(torch_dir)
    if not cuda:
        raise Unavailable("no CUDA runtime headers to build it with (set CUDA_HOME to a CUDA "
                          "toolkit, or pip install nvidia-cuda-runtime nvidia-cuda-crt beside torch)")
    os.makedirs(build, exist_ok=True)
    # streampool.h includes the generated streampool/version.h: written here from the library.
    gen = os.path.join(build, "generated")
    os.makedirs(os.path.join(gen, "streampool"), exist_ok=True)
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _capi.lib.sp_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    with open(os.path.join(gen, "streampool", "version.h"), "w") as f:
        f.write("#ifndef STREAMPOOL_VERSION_H\n#define STREAMPOOL_VERSION_H\n"
                f"#define STREAMPOOL_VERSION_MAJOR {major.value}\n"
                f"#define STREAMPOOL_VERSION_MINOR {minor.value}\n"
                f"#define STREAMPOOL_VERSION_PATCH {patch.value}\n#endif\n")
    lib = _library_path()
    cudart = []
    for home in cuda:
        for d in ("lib64", "lib"):
            if glob.glob(os.path.join(home, d, "libcudart.so*")):
                cudart = [f"-L{os.path.join(home, d)}", f"-Wl,-rpath,{os.path.join(home, d)}"]
                break
        if cudart:
            break
    from torch.utils import cpp_extension  # type: ignore[import-not-found]

    try:
        path = cpp_extension.load(
            name=name, sources=sources, build_directory=build, verbose=verbose,
            extra_cflags=_CFLAGS,
            extra_include_paths=[src, inc, gen] + [os.path.join(h, "include") for h in cuda],
            extra_ldflags=[lib, f"-Wl,-rpath,{os.path.dirname(lib)}",
                           f"-L{os.path.join(torch_dir, 'lib')}", "-lc10_cuda"]
            + cudart + ["-lcudart"] + _LDFLAGS,
            with_cuda=False, is_python_module=False)
    except Exception as e:  # the compiler's or ninja's message, as cpp_extension raised it
        raise Unavailable(f"building it in {build} failed: {e}") from e
    return path if isinstance(path, str) else built
