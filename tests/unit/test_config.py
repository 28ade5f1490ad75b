"""Flags: the original command lines parse; bad values name the flag."""

import csv
import dataclasses
import re

import pytest

from impala.algorithms.impala import ATARI
from impala.config import Config, parse_host_port
from impala.flags import flag_names, parse_config
from impala.presets import config_of, to_argv
from impala.registry import build_algorithm, builtin_presets
from tests.helpers import PRESETS, ROOT

ORIGINAL_README_FLAGS = [
    "--level_name=BreakoutNoFrameskip-v4", "--agent_name=SimpleConvNetAgent",
    "--num_action_repeats=1", "--batch_size=32", "--unroll_length=20",
    "--entropy_cost=0.01", "--learning_rate=0.0006", "--total_environment_frames=200000000",
    "--reward_clipping=abs_one", "--gradients_clipping=40.0",
]


def test_original_readme_command_line_parses():
    cfg = parse_config(ORIGINAL_README_FLAGS)
    assert cfg.level_name == "BreakoutNoFrameskip-v4"
    assert cfg.num_action_repeats == 1  # sets the action repeat here
    assert cfg.gradients_clipping == 40.0
    assert cfg.total_environment_frames == 200_000_000
    assert cfg.batch_size == 32  # set by the user, so the atari preset leaves it alone


def test_scalable_agent_flags_exist():
    names = ("logdir mode job_name task level_name agent_name batch_size unroll_length "
             "total_environment_frames num_action_repeats entropy_cost baseline_cost "
             "discounting reward_clipping gradients_clipping learning_rate decay momentum "
             "epsilon width height seed queue_capacity").split()
    assert [n for n in names if n not in flag_names(None)] == []


def test_bad_values_name_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--batch_size=0", "--discounting=1.5", "--learner_host=nohost",
                      "--target_return=nan", "--target_return_episodes=0",
                      "--redo_threshold=1.5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch_size must be > 0, got 0" in err
    assert "--discounting must be in [0, 1], got 1.5" in err
    assert "--learner_host: expected ip:port, got 'nohost'" in err
    assert "--target_return must be a number" in err
    assert "--target_return_episodes must be > 0, got 0" in err
    assert "--redo_threshold must be in [0, 1) and --redo_interval_frames > 0, got 1.5" in err


def test_the_vector_backend_for_a_level_it_cannot_serve_is_refused_at_the_command_line(
        capsys):
    with pytest.raises(SystemExit):
        parse_config(["--env_backend=ale_vector", "--level_name=CartPole-v1"])
    assert "--env_backend=ale_vector: 'CartPole-v1' is not an Atari id" in capsys.readouterr().err
    assert parse_config(["--env_backend=auto", "--level_name=CartPole-v1"]).env_backend == "auto"


def test_choices_are_enforced(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--reward_clipping=abs_two"])
    assert "invalid choice: 'abs_two'" in capsys.readouterr().err


def test_default_run_name_is_stable_so_the_same_command_resumes():
    assert parse_config(["--level_name=ALE/Pong-v5"]).resolved_run_name == \
        "ALE-Pong-v5_SimpleConvNetAgent"


def test_to_argv_round_trips_non_defaults():
    cfg = parse_config(["--level_name=CartPole-v1", "--batch_size=24", "--learning_rate=0.001"])
    assert parse_config(to_argv(cfg)) == cfg
    assert "--batch_size=24" in to_argv(cfg) and "--preset=classic" in to_argv(cfg)


@pytest.mark.parametrize("level,preset", [("PongNoFrameskip-v4", "atari"),
                                          ("ALE/Breakout-v5", "atari"),
                                          ("impala/DelayedCue-v0", "atari"),
                                          ("CartPole-v1", "classic")])
def test_the_preset_follows_the_environment(level, preset):
    cfg = parse_config([f"--level_name={level}"])
    assert cfg.preset == preset
    for name, value in PRESETS[preset].items():
        assert cfg.to_dict()[name] == value, name


def test_a_flag_the_user_sets_beats_the_preset_in_every_process():
    # 32 is the paper's default and not the preset's: it must still reach child processes.
    cfg = parse_config(["--batch_size=32", "--level_name=CartPole-v1"])
    assert cfg.batch_size == 32 and cfg.agent_name == "MLPAgent"
    child = parse_config(to_argv(cfg, job_name="actor", task=3))
    assert child.batch_size == 32 and child.task == 3 and child.preset == "classic"


def test_a_replay_ratio_set_alone_holds_from_the_first_frame(monkeypatch):
    # A preset that replays more over its first frames (the atari preset did, runs AE/AF):
    # --replay_ratio=0 must still mean off from the first frame, in every process.
    monkeypatch.setitem(ATARI.values, "initial_replay_ratio", 5.0)
    monkeypatch.setitem(ATARI.values, "initial_replay_frames", 2_000_000)
    assert parse_config(["--level_name=PongNoFrameskip-v4"]).replay_schedule.at(0) == 5.0
    for ratio in (0.0, 2.0):
        cfg = parse_config(["--level_name=PongNoFrameskip-v4", f"--replay_ratio={ratio}"])
        assert cfg.replay_schedule.at(0) == cfg.replay_schedule.largest == ratio
        child = parse_config(to_argv(cfg, job_name="actor"))
        assert child == dataclasses.replace(cfg, job_name="actor")
    # Set together, the user's initial phase is kept.
    both = parse_config(["--level_name=PongNoFrameskip-v4", "--replay_ratio=1",
                         "--initial_replay_frames=1000"])
    assert both.replay_schedule.at(0) == 5.0


def test_preset_none_gives_the_paper_settings():
    cfg = parse_config(["--preset=none"])
    assert cfg == Config()
    assert cfg.batch_size == 32 and cfg.learning_rate == 0.0006


def test_help_shows_each_presets_value(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default: 32; preset atari: {PRESETS['atari']['batch_size']}" in text
    assert "(default: auto; presets: atari, classic," in text


def test_an_unknown_level_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--level_name=NoSuchGame-v9"])
    assert "unknown level_name 'NoSuchGame-v9'" in capsys.readouterr().err


@pytest.mark.parametrize("text,expected", [("127.0.0.1:8001", ("127.0.0.1", 8001)),
                                           ("localhost:9", ("localhost", 9))])
def test_host_port(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["localhost", ":80", "host:0", "host:70000", "host:ab"])
def test_bad_host_port(text):
    with pytest.raises(ValueError):
        parse_host_port(text)


def test_the_presets_page_lists_every_preset_value():
    page = (ROOT / "docs" / "presets.md").read_text()
    for preset, values in PRESETS.items():
        for name, value in values.items():
            assert f"`--{name}={value}`" in page, (preset, name, value)


def test_derived_values_come_from_the_config_alone():
    cfg = config_of({"level_name": "CartPole-v1", "agent_name": "MLPAgent", "logdir": "/tmp/r",
                     "discounting": 0.9, "entropy_cost": 0.02, "entropy_floor": 0.7,
                     "num_action_repeats": 1})
    assert str(cfg.run_dir) == "/tmp/r/CartPole-v1_MLPAgent"
    assert cfg.env_config.level_name == "CartPole-v1"
    assert cfg.env_config.num_action_repeats == 1
    loss = build_algorithm(cfg).learning(model=None).config  # IMPALA's: no model needed
    assert (loss.discounting, loss.entropy_cost, loss.entropy_floor) == (0.9, 0.02, 0.7)
    assert str(Config(learner_device="cpu").device_for(3)) == "cpu"
    # auto and cuda: tests/integration/test_machine_defaults.py (a GPU per rank, if any)


def test_every_preset_states_its_rule_and_a_record_that_exists():
    """A preset is a rule and the evidence behind it (no run tallies in code): each record
    entry is a row of results/runs.csv or a test, and that row or test exists."""
    with open(ROOT / "results" / "runs.csv", newline="") as table:
        runs = {row["id"] for row in csv.DictReader(table)}
    for name, preset in builtin_presets().items():
        assert preset.rule and "\n" not in preset.rule, name
        assert preset.record or "unmeasured" in preset.rule, name
        for entry in preset.record:
            if "::" in entry:
                path, test = entry.split("::")
                assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.M), (name, entry)
            else:
                assert entry in runs, (name, entry)


def test_a_preset_serves_another_algorithm_only_if_it_sets_nothing_that_one_lacks(capsys):
    """Ape-X and R2D2 share their flags, so an R2D2 preset can run Ape-X (the Recall tests
    do); an Ape-X preset sets what IMPALA has no flag for, and is refused saying which."""
    cfg = parse_config(["--preset=r2d2_image", "--algorithm=apex", "--burn_in=0",
                        "--level_name=impala/Recall-v0"])
    assert (cfg.algorithm, cfg.preset, cfg.algorithm_flags.n_step) == ("apex", "r2d2_image", 5)
    assert parse_config(to_argv(cfg)) == cfg
    with pytest.raises(SystemExit):
        parse_config(["--preset=apex_atari", "--algorithm=impala"])
    assert "--preset=apex_atari is --algorithm=apex's and sets --exploration_frames" \
        in capsys.readouterr().err
