"""The command line of `experiment.py` (and the training flags of the frontend): one typed
`--name` per flag of the Config, grouped as every run's and each algorithm's own, with its
default under each preset in its help. Values go to presets.config_from_flags."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from impala.config import Config, shared_fields
from impala.presets import config_from_flags
from impala.registry import (
    builtin_algorithms,
    default_algorithm,
    known_algorithms,
    presets_of,
)

# Flags that are gone, each with what replaced it: an old command line fails with this
# message rather than argparse's bare "unrecognized arguments".
RETIRED_FLAGS = {
    "target_update_interval": (
        "--target_update_interval (updates between target copies) was replaced by "
        "--target_update_frames (frames over all learners between copies), so that the "
        "period does not change with --batch_size, --unroll_length or the number of "
        "learners; one learner's update brings batch_size x (unroll_length + 1 - overlap) "
        "x num_action_repeats frames"),
}


def _algorithm_named(argv: list[str]) -> list[str]:
    """The import path `--algorithm` names on this command line, if any, so that its own
    flags can be added before the whole line is parsed."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--algorithm", default="")
    known, _ = probe.parse_known_args(argv)
    return [known.algorithm] if ":" in known.algorithm else []


def add_config_flags(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> None:
    """One `--name` option per flag, typed, with its help and its default under each preset:
    the shared flags, then one group per algorithm's own (those named on `argv` included).
    Unset flags stay None, so presets know which flags the user set."""
    algorithms = known_algorithms(*_algorithm_named(sys.argv[1:] if argv is None else argv))
    presets = [preset for _, preset in presets_of(algorithms).values()]
    group = parser
    listed = {"algorithm": f"built in: {', '.join(builtin_algorithms())}",
              "preset": f"presets: {', '.join(p.name for p in presets)}"}
    for f in shared_fields():
        if f.name in SECTIONS:
            group = parser.add_argument_group(SECTIONS[f.name])
        shown = {"preset": "auto", "algorithm": default_algorithm()}.get(f.name, f.default)
        _add_flag(group, f, presets, shown, listed.get(f.name))
    groups: dict[type, list[str]] = {}
    for key, cls in algorithms.items():
        groups.setdefault(cls.flags_class, []).append(key)
    for flags_class, keys in groups.items():
        if dataclasses.fields(flags_class):
            group = parser.add_argument_group(f"flags of --algorithm={'/'.join(keys)}")
            for f in dataclasses.fields(flags_class):
                _add_flag(group, f, presets, f.default)
    for name in RETIRED_FLAGS:
        parser.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)


# The shared flags' groups in --help, by the first flag of each (in Config's order).
SECTIONS = {
    "mode": "what runs", "level_name": "environment", "algorithm": "agent and training",
    "replay_ratio": "replay (every algorithm)",
    "first_env": "this actor's place among the run's environments",
    "optimizer": "optimizer", "learner_host": "processes and transport",
    "log_interval_s": "logs and checkpoints",
}


def _add_flag(group, f: dataclasses.Field, presets: list, default: Any,
              choices: str | None = None) -> None:
    kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str)
                                                      else f.type.__name__]
    by_preset = [f"{p.name}: {p.values[f.name]}" for p in presets if f.name in p.values]
    shown = f"default: {default}" + (f"; preset {', '.join(by_preset)}" if by_preset else "")
    shown += f"; {choices}" if choices else ""
    group.add_argument(f"--{f.name}", type=kind, default=None,
                       choices=f.metadata["choices"], help=f"{f.metadata['help']} ({shown})")


def flag_names(algorithm: str | None) -> set[str]:
    """The names of every flag: the shared ones and each known algorithm's own."""
    names = {f.name for f in shared_fields()}
    for cls in known_algorithms(*([algorithm] if algorithm and ":" in algorithm else [])
                                ).values():
        names |= {f.name for f in dataclasses.fields(cls.flags_class)}
    return names


def config_from_namespace(namespace: argparse.Namespace) -> Config:
    """The Config of parsed flags (other options in `namespace`, the frontend's, are left
    alone); ValueError for a retired flag or bad values."""
    retired = [message for name, message in RETIRED_FLAGS.items()
               if getattr(namespace, name, None) is not None]
    if retired:
        raise ValueError("\n  ".join(retired))
    names = flag_names(getattr(namespace, "algorithm", None))
    return config_from_flags({k: v for k, v in vars(namespace).items()
                              if k in names and v is not None})


def parse_config(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="experiment.py",
        description="A learner, an actor, or a whole local run (see README).")
    try:
        add_config_flags(parser, argv)
    except ValueError as exc:  # an --algorithm=module:Class that cannot be imported
        parser.error(str(exc))
    namespace = parser.parse_args(argv)
    try:
        return config_from_namespace(namespace)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
