"""`quorum storage format --add-scram`: Kafka's syntax, clear errors naming the bad part, the bootstrap
file, the active controller committing it once, and a node's SCRAM users before its image has them."""

from __future__ import annotations

import asyncio
import base64

import pytest

from quorum.cli import main
from quorum.controller.controller import ControllerConfig
from quorum.controller.scram import ALTER_USER_SCRAM_CREDENTIALS
from quorum.image.image import MetadataImage
from quorum.security.scram import ScramClient, ScramServer, make_credential, salted_password
from quorum.server.bootstrap_metadata import (
    BOOTSTRAP_FILE,
    BootstrapError,
    NodeScramCredentials,
    parse_add_scram,
    read_bootstrap,
    scram_credentials,
)
from quorum.server.config import node_config
from quorum.server.controller_service import ControllerService
from quorum.server.storage import format_storage
from quorum.wire import metadata_records as mr
from quorum.wire.framing import RequestHeader
from quorum.wire.properties import format_properties
from quorum.wire.protocol import APIS, Request
from tests.controller.test_controller_batches import FakeNode


def controller_properties(tmp_path) -> dict[str, str]:
    return {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
            "log.dirs": f"{tmp_path / 'meta'},{tmp_path / 'other'}"}


def logs_in(credentials, mechanism: str, user: str, password: str) -> bool:
    server = ScramServer(mechanism, lambda name: credentials.get((name, mechanism)))
    client = ScramClient(mechanism, user, password)
    try:
        client.verify(server.final(client.final(server.first(client.first()))))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("text", [
    "SCRAM-SHA-512=[name=alice,password=alice-secret]",
    'scram-sha-256=[name="alice",password="a,b=c",iterations=8192]',
    " SCRAM-SHA-512 = [ name=alice , password=alice-secret ] ",
])
def test_kafkas_syntax_with_a_password(text: str) -> None:
    record = mr.decode_metadata_record(parse_add_scram(text))
    mechanism = "SCRAM-SHA-256" if record.mechanism == 1 else "SCRAM-SHA-512"
    password = "a,b=c" if mechanism == "SCRAM-SHA-256" else "alice-secret"
    assert record.name == "alice" and record.iterations == (8192 if mechanism == "SCRAM-SHA-256" else 4096)
    assert logs_in(scram_credentials([parse_add_scram(text)]), mechanism, "alice", password)


def test_salt_and_salted_password_in_base64() -> None:
    salt = b"0123456789abcdef"
    salted = base64.b64encode(salted_password("SCRAM-SHA-512", "pw", salt, 4096)).decode()
    value = parse_add_scram(f'SCRAM-SHA-512=[name=bob,salt="{base64.b64encode(salt).decode()}",'
                            f'saltedpassword="{salted}"]')
    assert mr.decode_metadata_record(value).salt == salt
    assert logs_in(scram_credentials([value]), "SCRAM-SHA-512", "bob", "pw")


@pytest.mark.parametrize(("text", "named"), [
    ("alice:secret", "expected MECHANISM=[name=NAME,password=PASSWORD]"),
    ("SCRAM-SHA-512=name=alice,password=x", "expected MECHANISM=[name=NAME,password=PASSWORD]"),
    ("SCRAM-SHA-1=[name=alice,password=x]", "unknown SCRAM mechanism 'SCRAM-SHA-1'"),
    ("SCRAM-SHA-512=[name=alice,pasword=x]", "unknown key 'pasword'"),
    ("SCRAM-SHA-512=[password=x]", "name= is missing or empty"),
    ("SCRAM-SHA-512=[name=,password=x]", "name= is missing or empty"),
    ("SCRAM-SHA-512=[name=alice]", "password= (or salt= and saltedpassword=) is missing"),
    ("SCRAM-SHA-512=[name=alice,password=x,iterations=100]", "iterations=100 is not a number from 4096 to 16384"),
    ("SCRAM-SHA-512=[name=alice,password=x,iterations=many]", "iterations=many is not a number"),
    ("SCRAM-SHA-512=[name=alice,saltedpassword=AAAA]", "saltedpassword needs salt="),
    ("SCRAM-SHA-512=[name=alice,salt=%%%,saltedpassword=AAAA]", "salt=%%% is not base64"),
    ("SCRAM-SHA-512=[name=alice,password=x,saltedpassword=AAAA,salt=AAAA]", "password or saltedpassword, not both"),
    ("SCRAM-SHA-512=[name=a,name=b,password=x]", "name given twice"),
    ('SCRAM-SHA-512=[name="alice,password=x]', "cannot read"),
])
def test_bad_syntax_gets_an_error_naming_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(BootstrapError) as error:
        parse_add_scram(text)
    assert str(error.value).startswith(f"--add-scram {text!r}: ") and named in str(error.value)


def test_format_writes_the_bootstrap_file_in_the_metadata_log_dir_and_refuses_bad_input(tmp_path, capsys) -> None:
    config_file = tmp_path / "controller.properties"
    config_file.write_text(format_properties(controller_properties(tmp_path)), encoding="utf-8")
    assert main(["storage", "format", "-c", str(config_file), "--add-scram", "SCRAM-SHA-512=[name=a,pasword=x]"]) == 1
    assert "unknown key 'pasword'" in capsys.readouterr().err
    assert not (tmp_path / "meta").exists()  # nothing written
    assert main(["storage", "format", "-c", str(config_file), "--add-scram",
                 "SCRAM-SHA-512=[name=alice,password=alice-secret]", "-S", "SCRAM-SHA-256=[name=bob,password=b]"]) == 0
    assert not (tmp_path / "other" / BOOTSTRAP_FILE).exists()
    values = read_bootstrap(tmp_path / "meta")
    records = [mr.decode_metadata_record(value) for value in values]
    assert (records[0].name, records[0].feature_level) == ("metadata.version", 11)
    assert [(r.name, r.mechanism) for r in records[1:]] == [("alice", 2), ("bob", 1)]
    assert read_bootstrap(tmp_path / "other") == ()
    plain = node_config({**controller_properties(tmp_path), "log.dirs": str(tmp_path / "plain")})
    format_storage(plain)
    assert read_bootstrap(tmp_path / "plain") == ()  # no --add-scram: no bootstrap metadata


def test_the_active_controller_commits_the_bootstrap_records_once(tmp_path) -> None:
    directory = tmp_path / "meta"
    format_storage(node_config(controller_properties(tmp_path)),
                   add_scram=["SCRAM-SHA-512=[name=alice,password=alice-secret]"])
    bootstrap = read_bootstrap(directory)
    node = FakeNode()
    service = ControllerService(node, ControllerConfig(), bootstrap=bootstrap)  # type: ignore[arg-type]
    service.register(node.dispatcher)
    api = APIS[ALTER_USER_SCRAM_CREDENTIALS]
    handler = node.dispatcher._handlers[ALTER_USER_SCRAM_CREDENTIALS]

    def delete_alice() -> object:
        body = api.request(deletions=[api.request.ScramCredentialDeletion(name="alice", mechanism=2)], upsertions=[])
        return asyncio.run(handler(Request(RequestHeader(ALTER_USER_SCRAM_CREDENTIALS, 0, 1, "t"), api, body))).body

    answer = delete_alice()  # the bootstrap records commit first, so alice exists to be deleted
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", 0)]
    assert node.image.features == {"metadata.version": 11} and node.image.scram == {}
    commits = list(node.commits)
    assert commits[-2:] == [2, 1]  # the bootstrap (metadata.version, alice), then the deletion
    answer = delete_alice()  # not bootstrapped again: alice stays deleted
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", 91)]
    assert node.commits == commits


def test_a_node_uses_its_bootstrap_file_until_its_image_has_scram_metadata(tmp_path) -> None:
    format_storage(node_config(controller_properties(tmp_path)),
                   add_scram=["SCRAM-SHA-512=[name=admin,password=pw]"])
    image = MetadataImage("c", 1)
    credentials = NodeScramCredentials(lambda: image, tmp_path / "meta")
    assert logs_in(credentials(), "SCRAM-SHA-512", "admin", "pw")
    other = make_credential("SCRAM-SHA-512", "new")
    image = MetadataImage("c", 1, features={"metadata.version": 11}, scram={("admin", "SCRAM-SHA-512"): other})
    assert not logs_in(credentials(), "SCRAM-SHA-512", "admin", "pw")
    assert logs_in(credentials(), "SCRAM-SHA-512", "admin", "new")
    image = MetadataImage("c", 1, features={"metadata.version": 11})  # every user deleted since
    assert credentials() == {}
