"""The wire format: round trip, and every kind of malformed message is a WireError."""

import json

import numpy as np
import pytest

from impala.transport import FieldSpec, WireError, decode, encode

SCHEMA = {"observation": FieldSpec("uint8", (3, 2, 2)), "reward": FieldSpec("float32", (3,))}
SCHEMAS = {"unroll": SCHEMA, "weights_request": None}
LIMIT = 1 << 20


def good_arrays():
    return {"observation": np.arange(12, dtype=np.uint8).reshape(3, 2, 2),
            "reward": np.array([0.0, 1.0, -1.0], dtype=np.float32)}


def test_round_trip():
    frames = encode("unroll", "actor-0", good_arrays(), policy_version=3)
    message = decode([bytes(f) for f in frames], SCHEMAS, LIMIT)
    assert message.kind == "unroll" and message.sender == "actor-0"
    assert message.meta == {"policy_version": 3}
    np.testing.assert_array_equal(message.arrays["observation"], good_arrays()["observation"])
    np.testing.assert_array_equal(message.arrays["reward"], good_arrays()["reward"])


def test_a_zero_dim_array_keeps_its_shape():
    """A 0-dim state entry (PopArt's statistics) arrives as the schema's () and a non
    contiguous array as its own values."""
    schemas = {"weights": {"mean": FieldSpec("float32", ()),
                           "weight": FieldSpec("float32", (2, 3))}}
    arrays = {"mean": np.array(2.5, dtype=np.float32),
              "weight": np.arange(6, dtype=np.float32).reshape(3, 2).T}
    message = decode([bytes(f) for f in encode("weights", "learner", arrays)], schemas, LIMIT)
    assert message.arrays["mean"].shape == () and message.arrays["mean"] == 2.5
    np.testing.assert_array_equal(message.arrays["weight"], arrays["weight"])


def test_message_without_arrays():
    message = decode([bytes(f) for f in encode("weights_request", "a", version=2)], SCHEMAS,
                     LIMIT)
    assert message.meta == {"version": 2} and message.arrays == {}


def header(**changes):
    base = {"format": 1, "kind": "unroll", "sender": "x",
            "fields": [["observation", "uint8", [3, 2, 2]], ["reward", "float32", [3]]],
            "meta": {}}
    base.update(changes)
    return json.dumps(base).encode()


OBS, REW = good_arrays()["observation"].tobytes(), good_arrays()["reward"].tobytes()


@pytest.mark.parametrize("frames,reason", [
    ([], "empty message"),
    ([b"\x00\xff garbage"], "header is not JSON"),
    ([b"[1, 2]"], "not a JSON object"),
    ([header(format=2), OBS, REW], "wire format 2"),
    ([header(kind="launch_missiles"), OBS, REW], "unknown message kind"),
    ([header(kind="weights"), OBS, REW], "unexpected message kind"),
    ([header(), OBS], "2 arrays but 1 frames"),  # truncated
    ([header(), OBS, REW, b"extra"], "2 arrays but 3 frames"),  # extra frame
    ([header(fields=[["observation", "uint8", [3, 2, 2]], ["bonus", "float32", [3]]]),
      OBS, REW], "unknown ['bonus']"),
    ([header(fields=[["observation", "float32", [3, 2, 2]], ["reward", "float32", [3]]]),
      OBS, REW], "dtype float32, expected uint8"),
    ([header(fields=[["observation", "uint8", [3, 4]], ["reward", "float32", [3]]]),
      OBS, REW], "shape (3, 4), expected (3, 2, 2)"),
    ([header(fields=[["observation", "object", [3, 2, 2]], ["reward", "float32", [3]]]),
      OBS, REW], "dtype 'object' is not one of"),
    ([header(fields=[["observation", "uint8", [-3, 2, 2]], ["reward", "float32", [3]]]),
      OBS, REW], "fields must be a list"),
    ([header(), OBS[:-1], REW], "11 bytes, expected 12"),
    ([header(sender=5), OBS, REW], "sender must be"),
    ([header(meta=[1]), OBS, REW], "meta must be"),
    ([header(), b"\x00" * (LIMIT + 1), REW], "oversized message"),
])
def test_malformed_messages_are_rejected_with_a_reason(frames, reason):
    with pytest.raises(WireError) as error:
        decode(frames, SCHEMAS, LIMIT)
    assert reason in str(error.value)


def test_nothing_is_unpickled():
    import pickle

    frames = [pickle.dumps({"kind": "unroll"}), OBS, REW]
    with pytest.raises(WireError, match="not JSON"):
        decode(frames, SCHEMAS, LIMIT)


def test_drop_accounting_stays_bounded_under_distinct_reasons():
    """Reasons carry sender-chosen text: a flood of distinct ones must not grow memory."""
    from impala.transport import DropLog

    logged = []
    drops = DropLog(logged.append)
    for i in range(DropLog.MAX_REASONS + 500):
        drops.drop("peer", f"field 'x{i}': shape (1,), expected (2,)")
    assert drops.total == DropLog.MAX_REASONS + 500
    assert len(drops.counts) == DropLog.MAX_REASONS + 1
    assert drops.counts[DropLog.OTHER] == 500
    # Each distinct reason once; "other" at its 1st drop and at every 100th (100..500).
    assert len(logged) == DropLog.MAX_REASONS + 1 + 5
