"""From flags to a Config and back, with presets in between.

`--preset` (default `auto`) replaces the defaults of the flags the user did not set with a
preset's values; `auto` takes the algorithm's preset for the environment's family
(envs.env_family), and a named preset brings the algorithm that declares it. Presets
belong to their algorithms (impala/algorithm.py `Preset`). A Config names its resolved
preset, and `to_argv` passes it on, so child processes resolve the same values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from impala.algorithm import Preset
from impala.config import Config, shared_fields
from impala.registry import algorithm_class, default_algorithm, known_algorithms, presets_of

NO_PRESET = "none"  # the flags' own defaults: the IMPALA paper's Atari settings
INITIAL_REPLAY_FLAGS = {"initial_replay_ratio", "initial_replay_frames"}


def config_from_flags(flags: dict[str, Any]) -> Config:
    """The Config of a command line: `flags` are those the user set (name -> value);
    every other flag takes its preset's value, else its default."""
    algorithm, preset = resolve_preset(flags)
    defaults = preset_defaults(preset, algorithm)
    if "replay_ratio" in flags and not INITIAL_REPLAY_FLAGS & flags.keys():
        # A ratio the user sets holds from the first frame: `--replay_ratio=0` must turn
        # replay off, not leave the preset's initial phase running.
        defaults.update(initial_replay_ratio=0.0, initial_replay_frames=0)
    cfg = config_of({**defaults, **flags, "preset": preset, "algorithm": algorithm})
    if cfg.env_backend == "ale_vector":
        from impala.ale_vector_loop import uses_ale_vector  # gymnasium, as resolve_preset

        uses_ale_vector(cfg.env_backend, cfg.level_name)  # ValueError for a level it lacks
    return cfg


def to_argv(cfg: Config, **overrides: Any) -> list[str]:
    """The flags of `cfg` as `--name=value` for a child process's command line: its
    algorithm and preset (so the child finds both, and the algorithm's flags, at once), and
    every flag whose value differs from that preset's default."""
    values = {**cfg.to_dict(), **overrides}
    defaults = preset_defaults(values["preset"], values["algorithm"])
    return [f"--algorithm={values['algorithm']}", f"--preset={values['preset']}"] + [
        f"--{name}={value}" for name, value in values.items()
        if name not in ("preset", "algorithm") and value != defaults[name]]


def preset_values(cfg: Config) -> dict[str, Any]:
    """The values the run's preset gave (empty for none)."""
    if cfg.preset == NO_PRESET:
        return {}
    return dict(_preset_named(cfg.preset, cfg.algorithm).values)


def resolve_preset(flags: dict[str, Any]) -> tuple[str, str]:
    """(algorithm, preset) of a command line: `--preset=auto` (the default) takes the
    algorithm's preset for the environment's family, else none; a named preset brings the
    algorithm that declares it, or serves another whose flags it only sets (one value-based
    algorithm with another's preset: they share their flags)."""
    algorithm = flags.get("algorithm") or ""
    preset = flags.get("preset", "auto")
    if preset == "auto":
        from impala.envs import env_family  # gymnasium: only when a level is resolved

        cls = algorithm_class(algorithm or default_algorithm())
        level = flags.get("level_name", Config.__dataclass_fields__["level_name"].default)
        family = env_family(level)
        matching = [p.name for p in cls.presets if family in p.families]
        return algorithm or default_algorithm(), matching[0] if matching else NO_PRESET
    if preset == NO_PRESET:
        return algorithm or default_algorithm(), preset
    presets = presets_of(known_algorithms(*([algorithm] if ":" in algorithm else [])))
    if preset not in presets:
        raise ValueError(f"--preset: unknown preset {preset!r}; choose auto, {NO_PRESET} or "
                         f"one of {', '.join(presets)}")
    owner = presets[preset][0]
    if algorithm and algorithm != owner:
        foreign = sorted(set(presets[preset][1].values) - set(_flag_defaults(algorithm)))
        if foreign:
            raise ValueError(f"--preset={preset} is --algorithm={owner}'s and sets "
                             f"{', '.join('--' + n for n in foreign)}, which "
                             f"--algorithm={algorithm} has not")
        return algorithm, preset
    return owner, preset


def preset_defaults(preset: str, algorithm: str) -> dict[str, Any]:
    """Every flag's default for `algorithm` under `preset` (or none), by name."""
    values = {} if preset == NO_PRESET else dict(_preset_named(preset, algorithm).values)
    return {**_flag_defaults(algorithm), **values, "preset": preset, "algorithm": algorithm}


def _flag_defaults(algorithm: str) -> dict[str, Any]:
    """Every flag a run of `algorithm` has (the shared ones and its own), by its default."""
    defaults = {f.name: f.default for f in shared_fields()}
    return defaults | {f.name: f.default
                       for f in dataclasses.fields(algorithm_class(algorithm).flags_class)}


def _preset_named(name: str, algorithm: str) -> Preset:
    """The preset `name`, among the algorithm's own first, then every known one's."""
    for preset in algorithm_class(algorithm).presets:
        if preset.name == name:
            return preset
    presets = presets_of(known_algorithms(*([algorithm] if ":" in algorithm else [])))
    if name not in presets:
        raise ValueError(f"--preset: unknown preset {name!r}")
    return presets[name][1]


def config_of(values: dict[str, Any]) -> Config:
    """A Config from flat flag values (shared and the algorithm's own); a flag that is
    another algorithm's is an error that says whose it is."""
    cls = algorithm_class(values.get("algorithm") or default_algorithm())
    shared = {f.name for f in shared_fields()}
    own = {f.name for f in dataclasses.fields(cls.flags_class)}
    foreign = sorted(set(values) - shared - own)
    if foreign:
        raise ValueError("; ".join(_foreign_flag(name, values) for name in foreign))
    own_flags = cls.flags_class(**{k: v for k, v in values.items() if k in own})
    return Config(**{k: v for k, v in values.items() if k in shared},
                  algorithm_flags=own_flags)


def _foreign_flag(name: str, values: dict[str, Any]) -> str:
    owners = [key for key, cls in known_algorithms().items()
              if name in {f.name for f in dataclasses.fields(cls.flags_class)}]
    algorithm = values.get("algorithm") or default_algorithm()
    if owners:
        return (f"--{name} is a flag of --algorithm={'/'.join(owners)}; "
                f"--algorithm={algorithm} has no use for it")
    return f"unknown flag --{name}"
