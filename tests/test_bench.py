"""bench/'s results files stay readable tables when a benchmark gains a column."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from tests.helpers import ROOT

# Loaded from its file, so bench/ (env.py, learner.py, ...) is not put on every test's path.
_spec = importlib.util.spec_from_file_location("bench_common", ROOT / "bench" / "common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def test_a_new_column_rewrites_the_file_under_one_header(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.report("x", [{"a": 1, "b": 2.0}], ["a", "b"])
    common.report("x", [{"a": 3, "r": 1.0, "b": 4.0}], ["a", "r", "b"])
    table = pd.read_csv(tmp_path / "x.csv")
    assert list(table.columns)[-3:] == ["a", "b", "r"]
    assert table["a"].tolist() == [1, 3] and table["r"].isna().tolist() == [True, False]


def test_a_row_wider_than_its_header_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(ValueError, match=r"x.csv: line 3 has 3 cells under a header of 2"):
        common.report("x", [{"a": 1, "b": 2}], ["a", "b"])


def test_a_file_with_only_its_header_gets_no_second_header(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "x.csv").write_text("date,commit,cores,cpu,a,b\n")
    common.report("x", [{"a": 1, "b": 2}], ["a", "b"])
    assert (tmp_path / "x.csv").read_text().count("date,") == 1
