"""A certificate authority and the certificates it signs, as PEM files, for local clusters and tests.

`quorum local-cluster --security` and the security tests need a CA, a certificate for every node
(valid for 127.0.0.1 and localhost, usable as server and as client: the controller listener is on
mutual TLS) and certificates for clients. `cryptography` makes them; nothing here is used by a node
at run time (nodes only read PEM files through `quorum.security.tls`).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "quorum"


@dataclass(frozen=True, slots=True)
class Issued:
    """One certificate: `pem` holds the certificate then its key (Kafka's PEM keystore), `cert` the
    certificate alone, `key` the key alone; `subject` is the RFC 2253 name a broker's principal shows."""

    pem: Path
    cert: Path
    key: Path
    subject: str


class CertificateAuthority:
    """A self-signed CA in `directory` (`ca.pem`, `ca.key`), made on first use and reused after."""

    def __init__(self, directory: str | Path, name: str = "quorum local CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cert_path = self.directory / "ca.pem"
        key_path = self.directory / "ca.key"
        if self.cert_path.exists() and key_path.exists():
            self._key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name)
        now = _now()
        self._cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=3650))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        _write(key_path, _key_pem(self._key))
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, days: float = 825, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              not_before: datetime.datetime | None = None) -> Issued:
        """A certificate for CN=`name` (files `<name>.pem`, `<name>.crt`, `<name>.key`), valid for `hosts`
        as server and usable as client; `days` may be negative for an expired one (tests)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or (_now() - datetime.timedelta(minutes=5))
        end = start + datetime.timedelta(days=days) if days > 0 else _now() + datetime.timedelta(days=days)
        if end <= start:
            start = end - datetime.timedelta(days=1)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self._cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self._key, hashes.SHA256()))
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        issued = Issued(self.directory / f"{name}.pem", self.directory / f"{name}.crt",
                        self.directory / f"{name}.key", f"CN={name},O={ORGANIZATION}")
        _write(issued.pem, cert_pem + _key_pem(key))
        issued.cert.write_bytes(cert_pem)
        _write(issued.key, _key_pem(key))
        return issued


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes) -> None:
    """Write a file that holds a private key, readable by its owner only."""
    path.touch(mode=0o600)
    path.write_bytes(data)
