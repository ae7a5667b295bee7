"""Certificates for tests, made by openssl (no X.509 library in the virtualenv): a CA and
a serving certificate it signs, as an extension API server needs behind an APIService."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServingCert:
    ca_file: Path
    """The CA's certificate (PEM): what an APIService's caBundle holds."""
    cert_file: Path
    key_file: Path

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()


def _openssl(*args: str, input: str | None = None) -> None:
    result = subprocess.run(
        ["openssl", *args], input=input, capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def serving_cert(directory: Path, *, service: str, namespace: str) -> ServingCert:
    """A new CA in `directory` and a serving certificate it signs for
    `DNS:<service>.<namespace>.svc` (the name kube-apiserver checks when it proxies to an
    APIService's Service), `DNS:localhost` and `IP:127.0.0.1`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, csr = directory / "serving.crt", directory / "serving.key", directory / "serving.csr"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-subj", f"/CN={service}-ca", "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj",
             f"/CN={service}.{namespace}.svc", "-keyout", str(key), "-out", str(csr))  # fmt: skip
    extensions = directory / "serving.ext"
    extensions.write_text(
        f"subjectAltName=DNS:{service}.{namespace}.svc,DNS:localhost,IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _openssl("x509", "-req", "-in", str(csr), "-days", "30", "-CA", str(ca),
             "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert),
             "-extfile", str(extensions))  # fmt: skip
    return ServingCert(ca_file=ca, cert_file=cert, key_file=key)


def verify(ca_pem: str, cert_pem: str, *, hostname: str, directory: Path) -> str:
    """`openssl verify` of `cert_pem` against `ca_pem` for `hostname`: its output, which
    ends in "OK" when the CA signed it and it names that host (raises otherwise)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "verify-ca.crt").write_text(ca_pem)
    (directory / "verify.crt").write_text(cert_pem)
    result = subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-verify_hostname", hostname,
         "-CAfile", str(directory / "verify-ca.crt"), str(directory / "verify.crt")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(
            f"certificate does not verify for {hostname}: {result.stdout}{result.stderr}"
        )
    return result.stdout.strip()
