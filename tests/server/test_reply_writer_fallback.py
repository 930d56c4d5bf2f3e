"""A Fetch answer's file span that the kernel will not sendfile is read and written instead.

asyncio falls back from sendfile(2) when the first call fails (a peer that has reset the
connection, a file system without sendfile); its fallback seeks and reads a file object, which a
span is not. The soak hit it after a SIGSTOP/SIGCONT of a broker (issue 19).
"""

from __future__ import annotations

import errno
import os

import pytest

from quorum.server.reply_writer import SENDFILE_MIN_BYTES
from tests.broker.test_zero_copy_fetch import _spliced
from tests.server.test_reply_writer_buffers import written


def test_a_span_the_kernel_will_not_send_is_read_and_written(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    request, body, expected = _spliced(tmp_path, SENDFILE_MIN_BYTES)  # a span sendfile is asked to send

    refused = []

    def refuse(*_: object) -> int:
        refused.append(True)
        raise OSError(errno.EINVAL, "sendfile refused")

    monkeypatch.setattr(os, "sendfile", refuse)

    received = written(request, body)
    assert refused, "the span went through sendfile(2) first"
    assert received.endswith(expected) and len(received) == 4 + 5 + len(expected)
    assert all(span.fd == -1 for span in body.spans())
