"""Flags: the original command lines parse; bad values name the flag."""

import pytest

from impala.config import Config, parse_config, parse_host_port

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


def test_scalable_agent_flags_exist():
    names = ("logdir mode job_name task level_name agent_name batch_size unroll_length "
             "total_environment_frames num_action_repeats entropy_cost baseline_cost "
             "discounting reward_clipping gradients_clipping learning_rate decay momentum "
             "epsilon width height seed queue_capacity").split()
    fields = Config.__dataclass_fields__
    assert [n for n in names if n not in fields] == []


def test_bad_values_name_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--batch_size=0", "--discounting=1.5", "--learner_host=nohost"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch_size must be > 0, got 0" in err
    assert "--discounting must be in [0, 1], got 1.5" in err
    assert "--learner_host: expected ip:port, got 'nohost'" in err


def test_choices_are_enforced(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--reward_clipping=abs_two"])
    assert "invalid choice: 'abs_two'" in capsys.readouterr().err


def test_default_run_name_is_stable_so_the_same_command_resumes():
    assert parse_config(["--level_name=ALE/Pong-v5"]).resolved_run_name == \
        "ALE-Pong-v5_SimpleConvNetAgent"


def test_to_argv_round_trips_non_defaults():
    cfg = parse_config(["--level_name=CartPole-v1", "--batch_size=16", "--learning_rate=0.003"])
    assert parse_config(cfg.to_argv()) == cfg
    assert "--batch_size=16" in cfg.to_argv()


@pytest.mark.parametrize("text,expected", [("127.0.0.1:8001", ("127.0.0.1", 8001)),
                                           ("localhost:9", ("localhost", 9))])
def test_host_port(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["localhost", ":80", "host:0", "host:70000", "host:ab"])
def test_bad_host_port(text):
    with pytest.raises(ValueError):
        parse_host_port(text)
