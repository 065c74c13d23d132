"""JSON lines (``zoo.io.json_line``, ``json_record``): orjson's speed, the standard library's
values, whatever the record holds."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from zoo.io import json_line, json_record


def same(a, b) -> bool:
    """Equal as JSON values, NaN equal to NaN (``json`` reads its own ``NaN`` back as a NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


RECORDS = [
    {"index": 0, "seed": 7372075668801838486, "classes": ["armenian-upper/U+0536", "é/ü"],
     "accuracy": 0.75, "nll": 0.5819533863157332, "confidence": [0.1, 1 / 3, 5e-324, 1e300],
     "correct": [1, 0, 1, 1], "seconds": 1.1e-05},
    {"nll": float("nan"), "brier": float("inf"), "low": -float("inf")},  # json writes NaN, ...
    {"seed": None, "classes": None},                     # a None
    {"value": np.float64(0.25), "count": np.int64(3)},  # numpy scalars (json: the float only)
    {"big": 2 ** 70, "neg": -(2 ** 64)},                 # integers beyond 64 bits
    {"text": "null", "nested": {"a": [1, [2, {"b": "null"}]]}},
    {"ok": True, "no": False, "empty": [], "obj": {}, "tuple": (1, 2)},
]


@pytest.mark.parametrize("record", RECORDS)
def test_json_line_reads_back_as_the_standard_library_writes_it(record):
    try:
        expected = json.loads(json.dumps(record))
    except TypeError:  # json refuses it too (numpy's int64): so must json_line
        with pytest.raises(TypeError):
            json_line(record)
        return
    line = json_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert same(json.loads(line), expected)
    assert same(json_record(line.decode()), expected)
    assert same(json_record(json.dumps(record)), expected)  # a line json wrote (older files)


def test_json_line_of_plain_records_equals_json_dumps_in_value_for_random_floats():
    rng = random.Random(0)
    floats = [rng.random() * 10.0 ** rng.randint(-300, 300) for _ in range(20_000)]
    record = {"confidence": floats, "correct": [rng.randint(0, 1) for _ in floats]}
    assert json.loads(json_line(record)) == record  # exact: shortest round-trip reprs both ways
    assert json_record(json_line(record).decode()) == record


@pytest.mark.parametrize("text", ['{"a":[1,2.5]}', '{"a": 1}', ' {"a":1}', '{"a":1} x', '{not json',
                                  "", "1 2", '{"a":1}\x0b', '{"a":1}\r\n\t ', '{"a":NaN}',
                                  '{"a":Infinity,"b":-Infinity}', '{"big":123456789012345678901}',
                                  '[1,2]', '{"s":"\\ud800"}', '{"a":1,"a":2}'])
def test_json_record_reads_a_line_as_json_loads_does(text):
    """Either parser, the same value or the same error, for lines of either writer and broken
    ones; the one documented exception, a compact line with an integer beyond 64 bits (which
    neither of the zoo's writers produces), is read as orjson reads it."""
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError, match=exc.msg):
            json_record(text)
        return
    if "big" in text:  # the documented exception: orjson's float
        assert json_record(text) == {"big": float(123456789012345678901)}
        assert json_record(text.replace(":", ": ")) == expected  # json's separator: exact
        return
    assert same(json_record(text), expected)
