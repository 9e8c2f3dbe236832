"""Shared by the import-only stand-ins in stand_ins/gpu (see ../README.md).

`make_stand_in(__name__)` turns the calling package into a stand-in: any attribute is a class whose use
raises NotImplementedError (calling it, instantiating it, subclasses' instances), usable where modules only
import names, annotate with them (`list[vf.State]`) or subclass them at load; and any submodule
(`import verifiers.types`, `from wandb.sdk import ...`) is a stand-in module of the same kind.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


def _unavailable(qualified: str) -> type:
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{qualified} is an import-only stand-in (stand_ins/gpu): not installed")

    class _Meta(type):
        def __call__(cls, *args, **kwargs):
            refuse()

        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _unavailable(f"{qualified}.{name}")

        def __getitem__(cls, item):  # for annotations like Thing[int]
            return cls

        def __or__(cls, other):
            return cls

        __ror__ = __or__

    return _Meta(
        qualified.rsplit(".", 1)[-1], (), {"__module__": qualified.rsplit(".", 1)[0], "__doc__": refuse.__doc__}
    )


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates stand-in submodules of the stand-in packages it serves."""

    def __init__(self) -> None:
        self.roots: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in self.roots and "." in fullname:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        _install(module)


_FINDER = _Finder()


def _install(module: types.ModuleType) -> None:
    name = module.__name__
    # A version that no version check accepts (transformers' is_torchao_available & co. then say False).
    module.__version__ = "0.0.0"

    def __getattr__(attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        value = _unavailable(f"{name}.{attribute}")
        setattr(module, attribute, value)
        return value

    module.__getattr__ = __getattr__


def make_stand_in(name: str) -> None:
    """Make the package `name` (already in sys.modules) and all its submodules stand-ins."""
    _install(sys.modules[name])
    _FINDER.roots.add(name.split(".", 1)[0])
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)  # after the real finders: a file in the stand-in's folder wins
