"""`quorum reassign-partitions`' reassignment JSON: Kafka's format read and written, bad files refused
with a message naming what is wrong."""

from __future__ import annotations

import json

import pytest

from quorum.reassign import Move, ReassignError, format_assignment_json, parse_reassignment_json, run


def test_reads_kafkas_json_with_or_without_log_dirs() -> None:
    text = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 1, "replicas": [1]}]})
    assert parse_reassignment_json(text) == [Move("t", 0, (2, 3)), Move("t", 1, (1,))]


def test_writes_kafkas_one_line_json_that_reads_back() -> None:
    moves = [Move("t", 0, (1, 2)), Move("u", 3, (3,))]
    text = format_assignment_json(moves)
    assert text == ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
                    '{"topic":"u","partition":3,"replicas":[3],"log_dirs":["any"]}]}')
    assert parse_reassignment_json(text) == moves


@pytest.mark.parametrize(("document", "says"), [
    ("{", "not valid JSON"),
    ("[]", '"partitions" list'),
    ('{"version": 2, "partitions": []}', "version 2"),
    ('{"partitions": []}', "names no partitions"),
    ('{"partitions": [{"partition": 0, "replicas": [1]}]}', 'no "topic"'),
    ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', '"partition" must be'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', 't-0: "replicas" must be'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "t-0: the replicas [1, 1]"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}', 'only "any"'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": []}]}', "one entry per replica"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, '
     '"replicas": [2]}]}', "Duplicate reassignment for partition t-0"),
])
def test_bad_files_are_refused_with_what_is_wrong(document: str, says: str) -> None:
    with pytest.raises(ReassignError) as refused:
        parse_reassignment_json(document)
    assert says in str(refused.value)


def test_actions_other_than_list_need_the_file_and_an_address() -> None:
    with pytest.raises(ReassignError, match="--verify needs --reassignment-json-file"):
        run("verify", "127.0.0.1:9092", None)
    with pytest.raises(ReassignError, match="expected HOST:PORT"):
        run("list", "nowhere", None)
