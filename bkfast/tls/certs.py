"""Throwaway certificate authorities and certificates (the `cryptography` library), for `bkfast sandbox
--tls` and tests: a CA, bookie certificates for 127.0.0.1/localhost, client certificates with Java's
role OU (`0:<role>;1:<cluster>`), written as PEM (PKCS#8 key) or PKCS12 files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Issued"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    cert: x509.Certificate
    chain: list

    def write_pem(self, directory: Path, name: str, password: bytes | None = None) -> tuple[Path, Path]:
        """(key file, certificate chain file); the key encrypted with `password` when given."""
        directory = Path(directory)
        enc = (serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption())
        key_path, cert_path = directory / f"{name}.key", directory / f"{name}.pem"
        key_path.write_bytes(self.key.private_bytes(serialization.Encoding.PEM,
                                                    serialization.PrivateFormat.PKCS8, enc))
        key_path.chmod(0o600)
        cert_path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [self.cert, *self.chain]))
        return key_path, cert_path

    def write_pkcs12(self, path: Path, password: bytes) -> Path:
        path = Path(path)
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"bkfast", self.key, self.cert, self.chain or None, serialization.BestAvailableEncryption(password)))
        path.chmod(0o600)
        return path


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str = "bkfast test CA"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=365))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def write_pem(self, path: Path) -> Path:
        path = Path(path)
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def write_pkcs12_trust(self, path: Path, password: bytes) -> Path:
        path = Path(path)
        path.write_bytes(pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(self.cert, b"ca")], serialization.BestAvailableEncryption(password)))
        return path

    def issue(self, common_name: str, *, ou: str | tuple[str, ...] | None = None, hosts: tuple[str, ...] = (),
              days: float = 30, expired: bool = False) -> Issued:
        """A certificate for `common_name` (subject OU `ou`, or several OU RDNs in that order, before the CN;
        SANs `hosts`); `expired`: valid until yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        units = () if ou is None else (ou,) if isinstance(ou, str) else tuple(ou)
        ous = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit) for unit in units]
        cn = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs = cn + ous if len(ous) <= 1 else ous + cn
        now = _now()
        if expired:
            start, end = now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)
        else:
            start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
        builder = (x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if hosts:
            names: list[x509.GeneralName] = []
            for h in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    names.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), [])
