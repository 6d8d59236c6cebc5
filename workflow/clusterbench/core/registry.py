"""Plugin registries: one mechanism behind every extension point.

An extension point is a package folder; each plugin is one module in it, named after the
plugin (``-`` in a plugin's name is ``_`` in its module's: the dataset format
``image-folder`` is ``clusterbench/formats/image_folder.py``). Adding a plugin is adding one
module: nothing else is edited, no list is kept by hand. Modules whose name starts with ``_``
are the package's own helpers, not plugins.

The names come from the files alone (:func:`pkgutil.iter_modules`): listing them imports
nothing, so the Snakefile can fill the config schema's choices at parse time even where a
plugin's module imports torch. A plugin's module is imported when it is used
(:meth:`Registry.module`).

======================  =====================================  ===================================
extension point         folder                                 a plugin provides
======================  =====================================  ===================================
models                  ``clusterbench/models/``               families of models by name
dataset formats         ``clusterbench/formats/``              a decoder
distributed backends    ``clusterbench/backends/``             a ``Runtime``
BatchNorm modes         ``clusterbench/bn/``                   how BN statistics cross ranks
schedulers              ``clusterbench/launch/schedulers/``    a ``Scheduler``
report pages            ``clusterbench/report/pages/``         pages and their captions
======================  =====================================  ===================================

Standard library only: the Snakefile imports this module.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


class UnknownPlugin(KeyError):
    """A name no plugin of the registry has; the message names the closest ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def module_name(name: str) -> str:
    """The module of plugin ``name``: ``-`` becomes ``_``."""
    return name.replace("-", "_")


def plugin_name(module: str) -> str:
    """The plugin a module is: ``_`` becomes ``-`` (``image_folder`` -> ``image-folder``)."""
    return module.replace("_", "-")


def closest(name: str, choices: list[str] | tuple[str, ...], n: int = 3) -> list[str]:
    """The choices most like ``name`` (for "did you mean" in messages)."""
    return difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)


def unknown_message(kind: str, name: str, choices: list[str] | tuple[str, ...]) -> str:
    """``unknown <kind> 'x' (closest: ...; choose from: ...)``."""
    near = closest(name, choices)
    hint = f"closest: {', '.join(near)}; " if near else ""
    return f"unknown {kind} {name!r} ({hint}choose from: {', '.join(choices)})"


@dataclass
class Registry:
    """The plugins of one extension point: the modules of ``package``.

    ``names`` keep a plugin's own spelling (``image-folder``); ``underscores`` keeps a module's
    name as it is (for points whose names are Python identifiers, e.g. ``small_cnn``).
    """

    package: str
    kind: str
    underscores: bool = False
    _modules: dict[str, ModuleType] = field(default_factory=dict, repr=False)
    _names: tuple[str, ...] | None = field(default=None, repr=False)

    def _path(self) -> list[str]:
        return list(importlib.import_module(self.package).__path__)

    def names(self) -> tuple[str, ...]:
        """Every plugin's name, sorted; nothing is imported but the package itself. Read once
        per process (the config check asks for every run)."""
        if self._names is None:
            self._names = self._scan()
        return self._names

    def _scan(self) -> tuple[str, ...]:
        found = []
        for info in pkgutil.iter_modules(self._path()):
            if info.name.startswith("_"):
                continue
            found.append(info.name if self.underscores else plugin_name(info.name))
        return tuple(sorted(found))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def check(self, name: str) -> str:
        """``name`` if it is a plugin's, else :class:`UnknownPlugin` naming the closest."""
        names = self.names()
        if name not in names:
            raise UnknownPlugin(unknown_message(self.kind, name, names))
        return name

    def module(self, name: str) -> ModuleType:
        """The module of plugin ``name`` (imported now, once)."""
        self.check(name)
        if name not in self._modules:
            module = module_name(name) if not self.underscores else name
            self._modules[name] = importlib.import_module(f"{self.package}.{module}")
        return self._modules[name]

    def get(self, name: str, attribute: str) -> Any:
        """``attribute`` of plugin ``name``'s module; an error naming both when it is missing."""
        module = self.module(name)
        try:
            return getattr(module, attribute)
        except AttributeError:
            raise AttributeError(
                f"{self.kind} plugin {name!r} ({module.__name__}) defines no {attribute!r}"
            ) from None

    def modules(self) -> dict[str, ModuleType]:
        """Every plugin's module, imported, by name."""
        return {name: self.module(name) for name in self.names()}
