"""TLS for listeners and the node's own connections, from Kafka's `ssl.*` settings, with Python's `ssl`.

Kafka's names: `ssl.keystore.type=PEM` with `ssl.keystore.location` (a PEM file holding the
certificate chain and the private key) or the inline `ssl.keystore.certificate.chain` and
`ssl.keystore.key`; `ssl.key.password` for an encrypted key; `ssl.truststore.location` (PEM CA
certificates) or the inline `ssl.truststore.certificates`; `ssl.client.auth` (none, requested,
required); `ssl.endpoint.identification.algorithm` (`https`, Kafka's default, checks the peer's
host name; empty does not). Each may be set for one listener as `listener.name.<name>.ssl.*`
(the listener name in lower case, as Kafka writes it), which wins over the plain key.

A client certificate names the connection's principal as Kafka's default principal builder does:
`User:` and the certificate's subject as an RFC 2253 distinguished name, most specific attribute
first (`User:CN=node-1,O=quorum`), mapped by `ssl.principal.mapping.rules` (Kafka's syntax,
`RULE:<pattern>/<replacement>/[LU],...,DEFAULT`: the first rule whose pattern matches the whole name
gives the principal name, `$1` for a group, L/U for lower/upper case; DEFAULT keeps the name).
"""

from __future__ import annotations

import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quorum.security.principal import KafkaPrincipal
from quorum.server.config import ConfigError

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_setting(props: Mapping[str, str], listener: str | None, key: str) -> tuple[str, str | None]:
    """`(the key that set it, value)` of `key` for `listener`: `listener.name.<listener>.<key>` first,
    then `key`; the key returned is the one to name in an error."""
    if listener:
        prefixed = f"listener.name.{listener.lower()}.{key}"
        if prefixed in props:
            return prefixed, props[prefixed]
    return key, props.get(key)


@dataclass(frozen=True, slots=True)
class SslSettings:
    """The `ssl.*` settings of one listener (or of a client), each with the key it came from."""

    keystore: tuple[str, str | None]
    chain: tuple[str, str | None]
    key: tuple[str, str | None]
    key_password: str | None
    truststore: tuple[str, str | None]
    trusted: tuple[str, str | None]
    client_auth: tuple[str, str]
    check_hostname: bool
    principal_rules: tuple[PrincipalRule, ...] = ()

    @classmethod
    def of(cls, props: Mapping[str, str], listener: str | None = None) -> SslSettings:
        def get(key: str) -> tuple[str, str | None]:
            return listener_setting(props, listener, key)

        kind_key, kind = get("ssl.keystore.type")
        if kind is not None and kind.upper() != "PEM":
            raise ConfigError(f"{kind_key}: only PEM keystores are supported, got {kind!r}")
        trust_kind_key, trust_kind = get("ssl.truststore.type")
        if trust_kind is not None and trust_kind.upper() != "PEM":
            raise ConfigError(f"{trust_kind_key}: only PEM truststores are supported, got {trust_kind!r}")
        auth_key, auth = get("ssl.client.auth")
        auth = (auth or "none").strip().lower()
        if auth not in CLIENT_AUTH:
            raise ConfigError(f"{auth_key} must be none, requested or required, got {auth!r}")
        _, algorithm = get("ssl.endpoint.identification.algorithm")
        rules_key, rules = get("ssl.principal.mapping.rules")
        return cls(principal_rules=parse_principal_rules(rules or "DEFAULT", rules_key),
                   keystore=get("ssl.keystore.location"), chain=get("ssl.keystore.certificate.chain"),
                   key=get("ssl.keystore.key"), key_password=get("ssl.key.password")[1],
                   truststore=get("ssl.truststore.location"), trusted=get("ssl.truststore.certificates"),
                   client_auth=(auth_key, auth),
                   check_hostname=(algorithm if algorithm is not None else "https").strip().lower() == "https")

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore[1] or self.chain[1])

    def server_context(self) -> ssl.SSLContext:
        """The context a TLS listener serves with: its keystore (required), its truststore for client
        certificates, `ssl.client.auth`."""
        if not self.has_keystore:
            raise ConfigError(f"{self.keystore[0]} (or ssl.keystore.certificate.chain and ssl.keystore.key) is "
                              f"required for a TLS listener")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_keystore(context)
        context.verify_mode = CLIENT_AUTH[self.client_auth[1]]
        if context.verify_mode != ssl.CERT_NONE and not self._load_truststore(context):
            raise ConfigError(f"{self.client_auth[0]}={self.client_auth[1]} needs a truststore: set "
                              f"{self.truststore[0]} (PEM CA certificates)")
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context the node's own connections (Raft, broker to controller, replica fetchers) and the
        tools use: the truststore checks the server, the keystore (when set) is the client certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if not self._load_truststore(context):
            context.load_default_certs()
        context.check_hostname = self.check_hostname
        if self.has_keystore:
            self._load_keystore(context)
        return context

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        key, location = self.keystore
        try:
            if location:
                context.load_cert_chain(location, password=self.key_password)
                return
            chain_key, chain = self.chain
            key_key, private_key = self.key
            if not chain or not private_key:
                raise ConfigError(f"{chain_key} and {key_key} are both needed for an inline PEM keystore")
            key = f"{chain_key}/{key_key}"
            with tempfile.TemporaryDirectory(prefix="quorum-keystore-") as directory:
                pem = Path(directory) / "keystore.pem"  # the ssl module loads keys from files only
                pem.touch(mode=0o600)
                pem.write_text(f"{chain.strip()}\n{private_key.strip()}\n", encoding="ascii")
                context.load_cert_chain(pem, password=self.key_password)
        except FileNotFoundError:
            raise ConfigError(f"{key}: no such file {location!r}") from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise ConfigError(f"{key}: not a PEM certificate chain with its private key (or the wrong "
                              f"ssl.key.password): {exc}") from None

    def _load_truststore(self, context: ssl.SSLContext) -> bool:
        """Load the CA certificates to trust; False when none is configured."""
        key, location = self.truststore
        inline_key, inline = self.trusted
        try:
            if location:
                context.load_verify_locations(cafile=location)
            elif inline:
                key, location = inline_key, "(inline)"
                context.load_verify_locations(cadata=inline)
            else:
                return False
        except FileNotFoundError:
            raise ConfigError(f"{key}: no such file {location!r}") from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise ConfigError(f"{key}: not PEM CA certificates: {exc}") from None
        return True


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One `ssl.principal.mapping.rules` entry; `pattern` None is DEFAULT."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name, count=1)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU])?)\s*(?:[,\n]\s*|$)")


def parse_principal_rules(text: str, key: str = "ssl.principal.mapping.rules") -> tuple[PrincipalRule, ...]:
    """Kafka's `ssl.principal.mapping.rules`; ConfigError naming the key for a rule that does not parse."""
    rules, position = [], 0
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise ConfigError(f"{key}: cannot read a rule at {text[position:position + 40]!r} "
                              f"(RULE:pattern/replacement/[LU] or DEFAULT, comma-separated)")
        position = match.end()
        if match[1] == "DEFAULT":
            rules.append(PrincipalRule())
            continue
        try:
            pattern = re.compile(match[2].replace("\\/", "/"))
        except re.error as exc:
            raise ConfigError(f"{key}: bad pattern {match[2]!r}: {exc}") from None
        replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match[3].replace("\\/", "/"))
        rules.append(PrincipalRule(pattern, replacement, match[4] or ""))
    return tuple(rules) or (PrincipalRule(),)


def certificate_principal(peer_certificate: Mapping[str, object] | None,
                          rules: tuple[PrincipalRule, ...] = (PrincipalRule(),)) -> KafkaPrincipal | None:
    """The principal a verified client certificate names (`ssl.getpeercert()`'s dict) by `rules`; None
    without a certificate. A name no rule maps is refused, as Kafka refuses it."""
    if not peer_certificate:
        return None
    subject = peer_certificate.get("subject") or ()
    rdns = ["+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(str(value))}" for name, value in rdn)
            for rdn in subject]  # type: ignore[attr-defined]
    name = ",".join(reversed(rdns))  # RFC 2253: the last RDN first
    for rule in rules:
        mapped = rule.apply(name)
        if mapped is not None:
            return KafkaPrincipal("User", mapped)
    raise ValueError(f"no ssl.principal.mapping.rules rule maps the certificate subject {name!r}")


_SHORT_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _escape(value: str) -> str:
    """RFC 2253 escaping of an attribute value."""
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
