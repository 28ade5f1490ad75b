"""impala.diagnose on checkpoints built to be blind to their input or to follow it: the
share of greedy actions the observation decides must tell them apart, on a real CartPole."""

from __future__ import annotations

import json

import pytest
import torch

from impala import checkpoint
from impala.assembly import assemble
from impala.diagnose import main as diagnose
from impala.envs import create_env, env_info
from impala.flags import parse_config


def make_run(tmp_path, algorithm: str, agent: str, prepare) -> str:
    """A run directory with meta.json and a checkpoint whose weights `prepare` set."""
    cfg = parse_config([f"--algorithm={algorithm}", f"--agent_name={agent}",
                        "--level_name=CartPole-v1", f"--logdir={tmp_path}", "--run_name=run"])
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "meta.json").write_text(json.dumps({"flags": cfg.to_dict()}))
    env = create_env(cfg.env_config)
    torch.manual_seed(cfg.seed)  # as impala.diagnose seeds its fresh network
    model = assemble(cfg, env_info(env, cfg.env_config), training=False).model
    env.close()
    with torch.no_grad():
        prepare(model)
    checkpoint.save(cfg.run_dir / checkpoint.CHECKPOINT_NAME, model, None,
                    {"frames": 1000, "updates": 5}, cfg.to_dict())
    return str(cfg.run_dir)


def table(capsys) -> dict[str, dict[str, str]]:
    """The printed Markdown table, by network (fresh, checkpoint), by column."""
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    names = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [dict(zip(names, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]
    return {row["network"]: row for row in rows}


def blind(model) -> None:
    """The torso's output layer zeroed: every observation gives the same features."""
    model.mlp[2].weight.zero_()


def following(model) -> None:
    """A torso saturated by its input and a strong advantage head: small changes of the
    pole's state swing the features, and the greedy action with them."""
    torch.manual_seed(0)
    model.mlp[0].weight.mul_(50.0)
    model.heads["advantage"].weight.normal_(0.0, 5.0)


@pytest.mark.parametrize("prepare, decides", [(blind, lambda x: x == 0),
                                              (following, lambda x: x > 0.2)])
def test_the_share_of_actions_the_observation_decides(tmp_path, capsys, prepare, decides):
    run_dir = make_run(tmp_path, "apex", "MLPAgent", prepare)
    assert diagnose([f"--run_dir={run_dir}", "--envs=2", "--steps=60"]) == 0
    rows = table(capsys)
    assert rows["checkpoint"]["frames"] == "1000"
    assert decides(float(rows["checkpoint"]["screen_decides"]))
    if prepare is blind:
        assert float(rows["checkpoint"]["feature_std"]) == 0.0


def deaf_to_actions(model) -> None:
    """The LSTM's input weights from the one-hot last action zeroed (the columns after the
    torso's features, before the reward's): its core cannot hear the last action."""
    width = model.lstm.weight_ih_l0.shape[1] - model.num_actions - 1
    model.lstm.weight_ih_l0[:, width:width + model.num_actions].zero_()


def test_an_lstm_agent_reports_what_its_core_hears(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r2d2", "MLPLSTMAgent", deaf_to_actions)
    # Half the actions random, so the last action varies whatever the untrained net prefers.
    assert diagnose([f"--run_dir={run_dir}", "--envs=2", "--steps=40", "--epsilon=0.5"]) == 0
    rows = table(capsys)
    for column in ("core_from_screen", "core_from_action", "core_from_reward"):
        assert float(rows["fresh"][column]) > 0.0  # a fresh core hears all three
    assert float(rows["checkpoint"]["core_from_action"]) == 0.0
    assert float(rows["checkpoint"]["core_from_screen"]) > 0.0
    # the checkpoint's torso is the fresh network's (same seed): the same screen figure
    assert rows["checkpoint"]["core_from_screen"] == rows["fresh"]["core_from_screen"]


def test_a_run_without_flags_is_refused_by_name(tmp_path):
    with pytest.raises(SystemExit, match="meta.json: cannot read the run's flags"):
        diagnose([f"--run_dir={tmp_path}"])
