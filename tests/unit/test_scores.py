"""The suite's scores (results/scores.py): the window of a score at N frames, HNS, and the
Atari-5 estimate, against Dopamine's published curves worked by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from results import scores


def test_the_score_at_n_frames_is_the_mean_of_the_episodes_of_the_last_million():
    episodes = pd.DataFrame({"frames": [500_000, 1_000_000, 1_000_001, 1_999_999, 2_000_000],
                             "episode_return": [1.0, 3.0, 10.0, 20.0, 30.0]})
    assert scores.score_at(episodes, 1_000_000) == 2.0
    assert scores.score_at(episodes, 2_000_000) == 20.0
    assert scores.score_at(episodes, 5_000_000) is None
    assert scores.iteration_means(episodes).to_dict() == {1_000_000: 2.0, 2_000_000: 20.0}


def test_hns_is_a_percentage_of_the_way_from_random_to_human():
    assert scores.hns("Qbert", 163.88) == 0.0
    assert scores.hns("Qbert", 13_455.0) == pytest.approx(100.0)
    assert scores.hns("DoubleDunk", -17.475) == pytest.approx(50.0)
    assert scores.hns("NoSuchGame", 1.0) is None


def test_atari5_needs_all_five_games_and_matches_a_hand_computation():
    five = {"BattleZone": 50.0, "DoubleDunk": -20.0, "NameThisGame": 100.0, "Phoenix": 60.0,
            "Qbert": 40.0}
    weights = {"BattleZone": 0.382, "DoubleDunk": 0.068, "NameThisGame": 0.311,
               "Phoenix": 0.124, "Qbert": 0.080}
    by_hand = 10 ** sum(w * math.log10(1 + max(five[g], 0)) for g, w in weights.items()) - 1
    assert scores.atari5(five) == pytest.approx(by_hand)
    assert scores.atari5({**five, "Qbert": None}) is None


def test_dopamines_agents_at_10m_frames():
    """IQN 68% and Rainbow 43% at 10M frames, from the mean of Dopamine's 5 seeds."""
    data = scores.dopamine()
    games = ("BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert")
    estimate = {agent: scores.atari5({g: scores.hns(g, scores.dopamine_score(
        data, g, agent, 10_000_000)) for g in games}) for agent in ("IQN", "Rainbow", "DQN")}
    assert estimate["IQN"] == pytest.approx(68.1, abs=0.1)
    assert estimate["Rainbow"] == pytest.approx(43.1, abs=0.1)
    assert estimate["DQN"] == pytest.approx(9.6, abs=0.1)


def test_the_readme_table_averages_the_seeds_and_dashes_what_is_not_measured():
    """Two seeds of Qbert: the table shows their mean at 5M, a dash at 10M (no episodes
    there), a dash for the games not run and for our estimate (it needs all five games),
    and Dopamine's Rainbow and IQN at the same frames with their estimates."""
    runs = pd.DataFrame({"id": ["q1", "q2"], "level": ["ALE/Qbert-v5", "ALE/Qbert-v5"]})
    episodes = {"q1": pd.DataFrame({"frames": [4_500_000], "episode_return": [1000.0]}),
                "q2": pd.DataFrame({"frames": [4_600_000], "episode_return": [3000.0]})}
    lines = scores.readme_table(runs, episodes.__getitem__).splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    rows = {row[0]: row[1:] for row in cells}
    assert list(rows)[:7] == list(scores.README_GAMES)
    data = scores.dopamine()
    rainbow_10m = scores.dopamine_score(data, "Qbert", "Rainbow", 10_000_000)
    assert rows["Qbert"][:3] == ["2", "2,000", "-"]
    assert rows["Qbert"][4] == f"{rainbow_10m:,.0f}"
    assert rows["Pong"][:3] == ["0", "-", "-"]
    estimate = rows["**Atari-5 estimate** (57-game median HNS)"]
    assert estimate[:3] == ["", "-", "-"]
    assert estimate[3:] == ["**11%**", "**43%**", "**40%**", "**68%**"]


def test_a_trial_is_shown_beside_the_defaults_for_the_iterations_it_reached():
    """A trial stopped at 2M frames shows its two iterations, beside the defaults' run of
    the same game over the same two (not its later ones)."""
    runs = pd.DataFrame({"id": ["d"], "level": ["ALE/Qbert-v5"], "figure": ["suite"],
                         "flags": [""], "commit": ["abc"]})
    trials = pd.DataFrame({"id": ["t"], "level": ["ALE/Qbert-v5"], "figure": ["suite-trial"],
                           "flags": ["--entropy_cost=0.001"], "commit": ["def"]})
    episodes = {
        "d": pd.DataFrame({"frames": [0.5e6, 1.5e6, 2.5e6, 3.5e6],
                           "episode_return": [100.0, 200.0, 300.0, 400.0]}),
        "t": pd.DataFrame({"frames": [0.4e6, 0.6e6, 1.5e6, 1.9e6],
                           "episode_return": [100.0, 300.0, 900.0, 5000.0]})}
    lines = scores.trial_lines(runs, trials, episodes.__getitem__)
    table = lines[lines.index("### Qbert") + 2:]
    assert table[0] == "| run | flags | commit | 1M | 2M |"
    assert table[2] == "| d | the defaults | abc | 100 | 200 |"
    assert table[3] == "| t | `--entropy_cost=0.001` | def | 200 | 2,950 |"
    episodes["t"]["episode_return"] /= 100  # a game of small returns keeps its tenths
    table = scores.trial_lines(runs, trials, episodes.__getitem__)[lines.index("### Qbert") + 2:]
    assert table[3] == "| t | `--entropy_cost=0.001` | def | 2.0 | 29.5 |"


def test_one_seed_is_placed_among_dopamines_five_seeds_from_their_published_range():
    """Qbert at 10M: Rainbow's seeds span 4,264 to 8,057 and IQN's 4,299 to 7,073
    (Dopamine's `Qbert.json`), so 4,494 falls among both, 4,000 below both and 9,000
    above both; a budget with no score gets a dash."""
    runs = pd.DataFrame({"id": ["low", "mid", "high"], "level": ["ALE/Qbert-v5"] * 3})
    measured = {name: {5_000_000: None, 10_000_000: score}
                for name, score in (("low", 4_000.0), ("mid", 4_494.0), ("high", 9_000.0))}
    lines = scores.seed_range_lines(runs, measured, scores.dopamine())
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines
            if line.startswith("| Qbert | 10M")]
    assert [row[2:] for row in rows] == [
        ["4,000", "4,264 to 8,057", "below all", "4,299 to 7,073", "below all"],
        ["4,494", "4,264 to 8,057", "among them", "4,299 to 7,073", "among them"],
        ["9,000", "4,264 to 8,057", "above all", "4,299 to 7,073", "above all"]]
    at_5m = [line for line in lines if line.startswith("| Qbert | 5M")]
    assert all(line.split("|")[3].strip() == "-" for line in at_5m)
