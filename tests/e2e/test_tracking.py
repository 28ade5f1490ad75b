"""W&B tracking (--wandb_project), with the real wandb package offline: a training run logs
every logs.csv row, its flags and curve.png into a W&B run folder inside the run
directory, read back here from W&B's own transaction log; a resume continues the same run."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from impala import tracking
from tests.helpers import CARTPOLE_FLAGS, CARTPOLE_RUN, EXPERIMENT, ROOT, free_port, read_csv

RUN = CARTPOLE_RUN
LEVELDB_HEADER = 7  # W&B's transaction log: a 7-byte file header, then leveldb-log records
BLOCK = 32768


def wandb_records(path: Path) -> list:
    """Every record of a `.wandb` transaction log, as W&B's protobuf Records (its log is
    leveldb's: 32 KiB blocks of chunks, each with a 7-byte header and a FULL, FIRST,
    MIDDLE or LAST type)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    records, parts, pos = [], b"", LEVELDB_HEADER
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def logged(run_dir: Path) -> tuple[list[str], dict, list[dict]]:
    """(the W&B run ids, the config, every history row) of the run folders in `run_dir`."""
    ids, config, history = [], {}, []
    for log in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.append(record.run.run_id)
                config |= {item.key: json.loads(item.value_json)
                           for item in record.run.config.update}
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
    return ids, config, history


def train(logdir: Path, frames: int, home: Path) -> subprocess.CompletedProcess:
    """CartPole with W&B on, as a user without an API key runs it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env["HOME"] = str(home)  # no ~/.netrc login; W&B's own settings stay in the test
    return subprocess.run(
        [sys.executable, EXPERIMENT, "--job_name=local", *CARTPOLE_FLAGS,
         f"--total_environment_frames={frames}", "--wandb_project=impala-tests",
         "--wandb_group=cartpole", f"--logdir={logdir}",
         f"--learner_host=127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_run_logs_its_rows_flags_and_curve_to_wandb_offline_and_resumes_the_same_run(
        tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    first = train(tmp_path, 20_000, home)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / RUN
    assert "W&B run" in first.stderr and "offline" in first.stderr
    ids, config, history = logged(run_dir)
    assert config["level_name"] == "CartPole-v1" and config["wandb_group"] == "cartpole"
    rows = read_csv(run_dir / "logs.csv")
    steps = [row for row in history if "frames" in row]
    assert [row["frames"] for row in steps] == rows["frames"].tolist()
    last = steps[-1]
    for column in rows.columns:  # every logs.csv column that has a number in the last row
        if rows[column].notna().iloc[-1]:
            assert last[column] == pytest.approx(rows[column].iloc[-1]), column
    assert any(row.get("curve/_type") == "image-file" for row in history)
    (image,) = (run_dir / "wandb").glob("offline-run-*/files/media/images/curve_*.png")
    assert image.stat().st_size > 10_000

    resumed = train(tmp_path, 30_000, home)  # the same command with a larger budget
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ids, _, history = logged(run_dir)
    assert len(ids) == 2 and ids[0] == ids[1]  # one W&B run, continued
    assert max(row["frames"] for row in history if "frames" in row) >= 30_000
    assert not list(tmp_path.glob("wandb")) and not list(home.glob("**/*.wandb"))


def test_a_missing_package_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(tracking.TrackingUnavailable, match=r"pip install -e '\.\[wandb\]'"):
        tracking.import_wandb()


def test_wandb_is_offline_without_a_key_and_follows_its_own_variables(tmp_path):
    assert tracking.wandb_mode({}, tmp_path / "no-netrc") == "offline"
    assert tracking.wandb_mode({"WANDB_API_KEY": "k" * 40}, tmp_path / "no-netrc") == "online"
    assert tracking.wandb_mode({"WANDB_MODE": "disabled"}, tmp_path / "no-netrc") is None
    netrc = tmp_path / ".netrc"
    netrc.write_text(f"machine {tracking.WANDB_HOST}\n  login user\n  password {'k' * 40}\n")
    netrc.chmod(0o600)
    assert tracking.wandb_mode({}, netrc) == "online"
