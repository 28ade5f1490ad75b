"""Which algorithms exist, found rather than listed, and each one loaded in its two halves
(impala/algorithm.py): its declaration wherever flags are read, its behaviour (torch code)
only where a process acts or learns.

- Every package (or module) of `impala.algorithms` that defines an `Algorithm` subclass
  with a `name` of its own: adding an algorithm is adding its package.
- Any class named by an import path, `--algorithm=package.module:Class`: an algorithm kept
  outside this repository (its module must be importable by every process of the run).

The `--algorithm` value is the key: a built-in name, or the import path itself, so child
processes resolve the same class from the same flag.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

from impala.algorithm import Algorithm, Behaviour, Preset

if TYPE_CHECKING:
    from impala.config import Config

BUILTIN_PACKAGE = "impala.algorithms"


@cache
def builtin_algorithms() -> dict[str, type[Algorithm]]:
    """name -> class for the algorithms in impala/algorithms/: the default, then the others
    in module order."""
    package = importlib.import_module(BUILTIN_PACKAGE)
    found: dict[str, type[Algorithm]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{BUILTIN_PACKAGE}.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Algorithm)
                    and value.__module__ == module.__name__ and "name" in vars(value)):
                if value.name in found:
                    raise ValueError(f"two algorithms are named {value.name!r}: "
                                     f"{found[value.name].__module__} and {module.__name__}")
                found[value.name] = value
    # The default first: --help lists its flags and presets first.
    return dict(sorted(found.items(), key=lambda item: not item[1].is_default))


def default_algorithm() -> str:
    """The built-in algorithm `--algorithm` means when it is not given."""
    defaults = [key for key, cls in builtin_algorithms().items() if cls.is_default]
    if len(defaults) != 1:
        raise ValueError(f"exactly one built-in algorithm must be the default, got {defaults}")
    return defaults[0]


@cache
def algorithm_class(key: str) -> type[Algorithm]:
    """The class `--algorithm=key` names; ValueError naming the choices if there is none."""
    builtin = builtin_algorithms()
    if key in builtin:
        return builtin[key]
    if ":" not in key:
        raise ValueError(f"--algorithm: unknown algorithm {key!r}; built in: "
                         f"{', '.join(builtin)}, or package.module:Class for one of your own")
    try:
        value = imported(key)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--algorithm={key}: cannot import it ({exc})") from None
    if not (isinstance(value, type) and issubclass(value, Algorithm) and value.name):
        raise ValueError(f"--algorithm={key}: not an impala.algorithm.Algorithm subclass "
                         "with a name")
    return value


def known_algorithms(*extra: str) -> dict[str, type[Algorithm]]:
    """The built-in algorithms, and those `extra` keys name (import paths)."""
    return {**builtin_algorithms(), **{key: algorithm_class(key) for key in extra}}


def presets_of(algorithms: dict[str, type[Algorithm]]) -> dict[str, tuple[str, Preset]]:
    """preset name -> (the key of the algorithm that owns it, the preset)."""
    presets: dict[str, tuple[str, Preset]] = {}
    for key, cls in algorithms.items():
        for preset in cls.presets:
            if preset.name in presets:
                raise ValueError(f"preset {preset.name!r} is declared by both "
                                 f"{presets[preset.name][0]} and {key}")
            presets[preset.name] = (key, preset)
    return presets


def builtin_presets() -> dict[str, Preset]:
    """Every built-in algorithm's presets, by name."""
    return {name: preset for name, (_, preset) in presets_of(builtin_algorithms()).items()}


def build_algorithm(cfg: Config) -> Algorithm:
    """The algorithm of a run, with its settings and its behaviour, in this process."""
    cls = algorithm_class(cfg.algorithm)
    algorithm = cls(cfg)
    if cls.behaviour:
        algorithm.acting = behaviour_class(cls.behaviour)(algorithm)
    return algorithm


@cache
def behaviour_class(path: str) -> type[Behaviour]:
    """The Behaviour class an algorithm's `behaviour` ("package.module:Class") names."""
    try:
        value = imported(path)
    except AttributeError:
        value = None
    if not (isinstance(value, type) and issubclass(value, Behaviour)):
        raise ValueError(f"behaviour {path!r}: not an impala.algorithm.Behaviour subclass")
    return value


def imported(path: str) -> object:
    """What an import path "package.module:Name" names; ImportError or AttributeError where
    there is no such module or name."""
    module_name, _, name = path.partition(":")
    return getattr(importlib.import_module(module_name), name)
