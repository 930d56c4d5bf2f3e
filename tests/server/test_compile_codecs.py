"""`compile_codecs`: a node compiles the codecs of a failover's messages at start, so that a Vote
crossing a node restarted since the last failover compiles nothing in the middle of the next one
(kafka-python compiles each message version's codec at its first use: 2-12 ms each, loop stopped).
In child interpreters: a codec compiled once stays compiled for the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import builtins, sys
    from quorum.raft import interface as raft
    from quorum.server import raft_rpc
    from quorum.wire.protocol import APIS, compile_codecs, encode_request, encode_response
    from quorum.wire.protocol import RequestHeader, decode_request, decode_response
    vote = APIS[raft_rpc.VOTE]
    if sys.argv[1] == "compiled":
        assert compile_codecs([(vote, 2)]) == 4
    compiled = []
    real = builtins.compile
    builtins.compile = lambda source, name, *rest, **kw: (compiled.append(name), real(source, name, *rest, **kw))[1]
    # a voter's round: the candidate encodes the request, the voter decodes it and encodes its answer,
    # the candidate decodes the answer
    body = raft_rpc.encode_request(raft.VoteRequest("c", 5, 2, 4, 100))
    request = decode_request(encode_request(vote, RequestHeader(vote.key, 2, 7, "node-2"), body)[4:])
    answer = raft_rpc.encode_response(vote.key, raft.VoteResponse(0, -1, 5, True))
    framed = encode_response(request, answer)
    decode_response(vote, 2, framed[4:])
    print(",".join(compiled) or "-")
""")


@pytest.mark.parametrize("mode", ["compiled", "lazy"])
def test_a_vote_round_compiles_nothing_once_its_codecs_are_compiled(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    compiled = out.stdout.strip()
    if mode == "compiled":
        assert compiled == "-", f"a warmed Vote round still compiled {compiled}"
    else:  # the control: without it, the round compiles the four codecs on the way
        assert "vote_request_v2" in compiled and "vote_response_v2" in compiled, compiled
