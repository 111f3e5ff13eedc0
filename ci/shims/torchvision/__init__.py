"""Permissive torchvision stub for a CPU-only SGLang *argument-parser oracle*.

PyPI's Linux torchvision wheels link libtorch_cuda/libc10_cuda and fail to load against the
local torch 2.13.0+cpu wheel ("operator torchvision::nms does not exist"). server_args.py only
needs the import chain to succeed; nothing here is ever executed by the parser.
"""

import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stub"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class _Dummy:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        raise NotImplementedError("torchvision stub")

    def __getattr__(self, name):
        return _Dummy()


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "InterpolationMode":
        return InterpolationMode
    return _Dummy()


__getattr__ = _module_getattr


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []  # every stub module is a package
        m.__getattr__ = _module_getattr
        return m

    def exec_module(self, module):
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


sys.meta_path.insert(0, _StubFinder())
