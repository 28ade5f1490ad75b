"""Run-directory files: numbers written plainly and at full precision."""

import numpy as np
import pandas as pd

from impala.logs import CsvLog, redact


def test_numpy_scalars_are_written_as_plain_numbers(tmp_path):
    log = CsvLog(tmp_path / "x.csv", ["a", "b", "c", "d"])
    log.write({"a": np.float64(0.1) + np.float64(0.2), "b": np.int64(3), "c": None,
               "d": 1 / 3})
    log.close()
    frame = pd.read_csv(tmp_path / "x.csv")
    assert frame["a"][0] == 0.1 + 0.2  # repr keeps every bit
    assert frame["b"][0] == 3 and np.isnan(frame["c"][0]) and frame["d"][0] == 1 / 3


def test_secrets_are_never_stored():
    flags = {"ssh_password": "hunter2", "api_token": "x", "batch_size": 32}
    assert redact(flags) == {"batch_size": 32}


def test_a_resumed_run_appends_under_the_header_already_there(tmp_path):
    """A run started by an older version with fewer columns: rows never shift."""
    old = CsvLog(tmp_path / "logs.csv", ["time", "frames"])
    old.write({"time": 1.0, "frames": 10})
    old.close()
    new = CsvLog(tmp_path / "logs.csv", ["time", "frames", "stream_restarts"])
    new.write({"time": 2.0, "frames": 20, "stream_restarts": 5})
    new.close()
    frame = pd.read_csv(tmp_path / "logs.csv")
    assert list(frame.columns) == ["time", "frames"]
    assert frame["frames"].tolist() == [10, 20]
