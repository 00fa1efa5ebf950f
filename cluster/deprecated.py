"""Import paths of delayq 0.1 that moved in 0.2: each still works, with a
DeprecationWarning naming the new path, until 0.3 removes it (CHANGELOG.md).

`cluster/__init__.py` installs the finder; ``from cluster.client import DelayClient``
is answered by cluster/client/__init__.py's module ``__getattr__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

# The modules 0.1 documented for users, and where each lives now.
MOVED_MODULES = {
    "cluster.config": "cluster.settings.config",
    "cluster.consumer": "cluster.client.consumer",
    "cluster.jobs": "cluster.model.jobs",
    "cluster.kafka_conn": "cluster.connections.kafka_conn",
}
REMOVED_IN = "0.3"


def warn_moved(old: str, new: str) -> None:
    """The DeprecationWarning of an old path, attributed to the code importing it (past
    the import machinery's frames)."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib"):
            pass  # warnings.warn skips these frames itself: not counted
        elif name == __file__ or frame.f_code.co_name == "__getattr__":
            level += 1
        else:
            break
        frame = frame.f_back
    warnings.warn(
        f"{old} is deprecated since delayq 0.2 and goes in {REMOVED_IN}: use {new}",
        DeprecationWarning,
        stacklevel=level,
    )


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path: a module of its own (the new one keeps its name and
    spec) holding the new module's names."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default: an empty module

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED_MODULES[module.__name__]
        warn_moved(module.__name__, new)
        names = vars(importlib.import_module(new))
        module.__dict__.update({k: v for k, v in names.items() if not k.startswith("__")})


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
