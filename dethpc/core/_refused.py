"""Stand-ins for the names of Determined's API that dethpc refuses.

Owns: ``refuse(name)`` (raise ``UnsupportedError`` with the message
``dethpc.core.determined_rules`` holds for a refused Determined name) and the stubs that
take such a name's place, so that the user's code fails where it calls (or reads) the
name, with that message, never with an ``AttributeError``: ``refused_function``,
``refused_class`` (instantiating it or any subclass refuses; so does reading a public
attribute the class lacks), ``RefusedAttribute`` (a descriptor), ``RefusedModule`` and
``module_getattr`` (for a real module that stands in for one of Determined's).
Must not: decide what is refused (the table does), or import more than the standard
library and ``dethpc.common`` before a refusal fires.
"""

from __future__ import annotations

import abc
import functools
import types
from collections.abc import Callable
from typing import Any, NoReturn

from dethpc.common.errors import UnsupportedError


def refuse(name: str) -> NoReturn:
    """Raise the refusal of Determined's ``name`` (``determined.pytorch.PyTorchCallback``)."""
    from dethpc.core.determined_rules import refusal

    raise UnsupportedError(name, refusal(name))


def refused_function(name: str) -> Callable[..., Any]:
    """A function that refuses ``name`` when called (any arguments)."""
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(name)

    refused.__name__ = refused.__qualname__ = name.rsplit(".", 1)[-1]
    refused.__doc__ = f"Determined's ``{name}``: refused on dethpc (calling it says why)."
    return refused


def refused_method(name: str) -> Any:
    """A method (in a class body) that refuses ``name`` when called."""
    inner = refused_function(name)

    @functools.wraps(inner)
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(name)

    return method


class RefusedAttribute:
    """A class attribute (or property) that refuses ``name`` when read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> NoReturn:
        refuse(self.name)


#: the dunder methods Determined's classes offer users (``with``, ``for``, ``len``...):
#: reading one of a refused class refuses; any other private name is an AttributeError
PROTOCOL_DUNDERS = frozenset({"__enter__", "__exit__", "__iter__", "__next__", "__len__",
                              "__getitem__"})


def module_getattr(module: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` (PEP 562) for a module standing in for Determined's
    ``module``: any public name it lacks refuses."""
    def __getattr__(attr: str) -> Any:  # noqa: N807 - the module protocol's name
        if attr.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {attr!r}")
        refuse(f"{module}.{attr}")

    return __getattr__


class _RefusedMeta(abc.ABCMeta):
    """Classes standing in for a refused Determined class: creating an instance (of it
    or of a user's subclass) refuses, and so does reading a public attribute it lacks.
    An ``ABCMeta``, so that a subclass may also derive from ``abc.ABC``."""

    _dethpc_refused: str

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(cls._dethpc_refused)

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("_") and attr not in PROTOCOL_DUNDERS:
            raise AttributeError(attr)
        refuse(f"{cls._dethpc_refused}.{attr}")


def refused_class(name: str) -> type:
    """A class standing in for Determined's class ``name``."""
    short = name.rsplit(".", 1)[-1]
    return _RefusedMeta(short, (), {
        "_dethpc_refused": name, "__module__": __name__,
        "__doc__": f"Determined's ``{name}``: refused on dethpc (using it says why)."})


class RefusedModule(types.ModuleType):
    """A module standing in for Determined's module ``name``: reading any public name of
    it refuses."""

    def __init__(self, name: str) -> None:
        super().__init__(name.replace("determined", "dethpc", 1),
                         f"Determined's ``{name}``: refused on dethpc.")
        self._dethpc_refused = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        refuse(f"{self._dethpc_refused}.{attr}")
