"""The security of a `quorum local-cluster --security ...`: a CA, node certificates, users, and the
settings nodes and clients use.

Layout: controllers listen on `CONTROLLER` over mutual TLS (every node, and the tools, present a
certificate of the cluster's CA). Each broker serves three client listeners: `SSL` (client
certificates requested, not required), `SASL_SSL` (brokers replicate over it, logging in as `admin`
with SCRAM-SHA-512) and `SASL_PLAINTEXT`, both SASL ones with PLAIN and SCRAM-SHA-256/512 for the
same users, and OAUTHBEARER with Kafka's unsecured validator (tokens with `alg` none, whose `sub` is
the principal; every token must hold the scope `kafka`). `alice` is the user a cluster's clients get.
Unsecured tokens prove nothing: any client may claim any principal, the admin too; like Kafka's
validator, this is for development clusters only. PLAIN users are the JAAS config's; SCRAM
users live in the metadata log, as in Kafka: `add_scram()` are the `storage format --add-scram`
arguments that bootstrap them.
With the authorizer on (`quorum local-cluster --security` turns it on, as a secured Kafka cluster
runs), `allow.everyone.if.no.acl.found` is false and the super users are `admin` and the nodes' and
tools' certificate principals: the admin can create topics and ACLs; alice can do nothing until granted.
Everything lives in `<cluster dir>/security` and is kept across restarts.
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path

from quorum.net.client_security import ClientSecurity, SaslLogin
from quorum.security.certificates import ORGANIZATION, CertificateAuthority

PROTOCOLS = ("SSL", "SASL_SSL", "SASL_PLAINTEXT")
"""A secured broker's client listeners, its first (inter-broker) one first."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTH_SCOPE = "kafka"
"""The scope every OAUTHBEARER token must hold (`unsecuredValidatorRequiredScope`)."""
KAFKA_PYTHON_PROVIDER = "client_epochs.kafka_python.UnsecuredTokenProvider"
USERS = ("admin", "alice")
KAFKA_PYTHON_NAMES = {"security.protocol": "security_protocol", "ssl.ca.location": "ssl_cafile",
                      "sasl.mechanism": "sasl_mechanism", "sasl.username": "sasl_plain_username",
                      "sasl.password": "sasl_plain_password"}
"""librdkafka's name -> kafka-python's, for the settings `client_settings` gives."""
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOOLS = "quorum-tools"
_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
            "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
            "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
            "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"}


class LocalSecurity:
    """Certificates and users of one local cluster (made on first use, then reused)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.ca = CertificateAuthority(self.directory)
        users = self.directory / "users.json"
        if users.exists():
            self.passwords: dict[str, str] = json.loads(users.read_text(encoding="utf-8"))
        else:
            self.passwords = {user: secrets.token_urlsafe(12) for user in USERS}
            users.touch(mode=0o600)
            users.write_text(json.dumps(self.passwords), encoding="utf-8")
        self.tool = self._certificate(TOOLS)

    def _certificate(self, name: str) -> Path:
        pem = self.directory / f"{name}.pem"
        return pem if pem.exists() else self.ca.issue(name).pem

    def node_properties(self, node_id: int, role: str, ports: dict[str, int],
                        host: str = "127.0.0.1") -> dict[str, str]:
        """A node's listeners and their security (`ports`: listener name -> port; a controller has
        CONTROLLER only, a broker the PROTOCOLS)."""
        props = {
            "listener.security.protocol.map": "CONTROLLER:SSL,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "PLAINTEXT:PLAINTEXT",
            "listeners": ",".join(f"{name}://{host}:{port}" for name, port in ports.items()),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self._certificate(f"node-{node_id}")),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.cert_path),
            "listener.name.controller.ssl.client.auth": "required",
        }
        if role == "broker":
            props["inter.broker.listener.name"] = "SASL_SSL"
            props["sasl.mechanism.inter.broker.protocol"] = "SCRAM-SHA-512"
            props["listener.name.ssl.ssl.client.auth"] = "requested"
            admin = self.passwords["admin"]
            users = " ".join(f'user_{user}="{password}"' for user, password in self.passwords.items())
            for listener in ("sasl_ssl", "sasl_plaintext"):
                for mechanism in SASL_MECHANISMS:
                    key = f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"
                    if mechanism == "OAUTHBEARER":  # Kafka's unsecured validator, the scope required
                        props[key] = (f'{_MODULES[mechanism]} required unsecuredLoginStringClaim_sub="admin" '
                                      f'unsecuredValidatorRequiredScope="{OAUTH_SCOPE}";')
                        continue
                    plain_users = f" {users}" if mechanism == "PLAIN" else ""  # SCRAM users: the metadata log's
                    props[key] = f'{_MODULES[mechanism]} required username="admin" password="{admin}"{plain_users};'
        return props

    def add_scram(self) -> list[str]:
        """`quorum storage format --add-scram` arguments: every user, for both SCRAM mechanisms."""
        return [f'{mechanism}=[name={user},password="{password}"]' for user, password in self.passwords.items()
                for mechanism in SASL_MECHANISMS if mechanism.startswith("SCRAM")]

    def authorizer_properties(self, node_ids: list[int]) -> dict[str, str]:
        """Kafka's StandardAuthorizer with no ACL meaning no access; super users: `admin` (brokers
        replicate as admin) and the certificate principals of the nodes `node_ids` and of the tools
        (the controller listener's mutual TLS)."""
        names = [*(f"node-{node_id}" for node_id in node_ids), TOOLS]
        return {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "false",
                "super.users": ";".join(["User:admin", *(f"User:CN={name},O={ORGANIZATION}" for name in names)])}

    def client_settings(self, protocol: str, user: str = "alice", mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka (confluent-kafka, kcat) settings for a client of listener `protocol`."""
        settings = {"security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            settings["ssl.ca.location"] = str(self.ca.cert_path)
        if protocol.startswith("SASL") and mechanism == "OAUTHBEARER":  # librdkafka's own unsecured tokens
            settings.update({"sasl.mechanism": mechanism, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                             "sasl.oauthbearer.config": self.oauth_config(user)})
        elif protocol.startswith("SASL"):
            settings.update({"sasl.mechanism": mechanism, "sasl.username": user,
                             "sasl.password": self.passwords[user]})
        return settings

    @staticmethod
    def oauth_config(user: str = "alice", scope: str = OAUTH_SCOPE) -> str:
        """librdkafka's `sasl.oauthbearer.config` for an unsecured token naming `user` with `scope`."""
        return f"principal={user} scope={scope}"

    def kafka_python_settings(self, protocol: str, user: str = "alice",
                              mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """The same client in kafka-python's names (KafkaProducer, KafkaConsumer, KafkaAdminClient)."""
        settings = self.client_settings(protocol, user, mechanism)
        return {KAFKA_PYTHON_NAMES[key]: value for key, value in settings.items() if key in KAFKA_PYTHON_NAMES}

    def kafka_python_oauth_line(self, protocol: str, user: str = "alice") -> str:
        """kafka-python's OAUTHBEARER settings as a line to read (its token provider is an object)."""
        settings = self.kafka_python_settings(protocol, user, "OAUTHBEARER")
        provider = f"{KAFKA_PYTHON_PROVIDER}({self.oauth_config(user)!r})"
        return " ".join([*(f"{key}={value}" for key, value in settings.items()),
                         shlex.quote(f"sasl_oauth_token_provider={provider}")])

    def command_config(self, protocol: str) -> Path:
        """A `--command-config` file for the admin on listener `protocol` (Kafka's tools' properties,
        librdkafka's names; `quorum get-offsets`, `reassign-partitions` and `describe` take it), with
        the admin's password: readable by its owner only."""
        settings = self.client_settings(protocol, "admin", "SCRAM-SHA-512" if protocol == "SASL_SSL" else "PLAIN")
        if protocol == "SSL":  # the tools' certificate: a super user, and what the controllers ask for
            settings["ssl.certificate.location"] = settings["ssl.key.location"] = str(self.tool)  # chain and key
        path = self.directory / f"admin-{protocol.lower()}.properties"
        path.touch(mode=0o600)
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")
        return path

    def to_controllers(self) -> ClientSecurity:
        """What the tools (readiness, describe) present to the controllers: the tools' certificate."""
        return ClientSecurity.of_client_properties({
            "security.protocol": "SSL", "ssl.ca.location": str(self.ca.cert_path),
            "ssl.certificate.location": str(self.tool)})

    def to_brokers(self) -> ClientSecurity:
        """What the tools use on a broker's first (SSL) listener."""
        return self.to_controllers()

    def admin_login(self, mechanism: str = "SCRAM-SHA-512") -> SaslLogin:
        return SaslLogin(mechanism, "admin", self.passwords["admin"])
