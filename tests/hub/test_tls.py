"""A member behind TLS with a private CA: uvicorn serving the member's web app over HTTPS on
loopback with a certificate this test's CA signed. The hub checks the certificate against
``ca_file``; without it the pull fails (and says why); ``verify_tls: false`` skips the check."""

from __future__ import annotations

import datetime as dt
import ipaddress
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.hub.conftest import hub_settings
from tests.web.conftest import Demo, run_demo

from gpusteward.hub.loop import HubPuller
from gpusteward.hub.store import HubStore
from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.store.leadership import AlwaysLeader


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    issuer: str,
    *,
    ca: bool,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        ).add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
        builder = builder.add_extension(san, critical=False).add_extension(aki, critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _certs(base: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 that it signed: (ca.pem, cert.pem, key.pem)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("gpusteward test CA", ca_key, ca_key, "gpusteward test CA", ca=True)
    cert = _cert("127.0.0.1", key, ca_key, "gpusteward test CA", ca=False)
    paths = base / "ca.pem", base / "cert.pem", base / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_pem(key))
    return paths


@pytest.fixture(scope="module")
def tls_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Demo, str, Path]]:
    base = tmp_path_factory.mktemp("tls")
    demo = run_demo(base / "state.db")
    ca, cert, key = _certs(base)
    port = free_port()
    config = uvicorn.Config(
        demo.app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off",
        ssl_certfile=str(cert), ssl_keyfile=str(key),
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a guard against a server that never starts
    while not server.started:
        assert thread.is_alive(), "the TLS server did not start"
        assert time.monotonic() < deadline, "the TLS server did not start in time"
        time.sleep(0.05)
    try:
        yield demo, f"https://127.0.0.1:{port}", ca
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("member", "pulled"),
    [
        ({"ca_file": "CA"}, True),
        ({}, False),  # the system's CAs do not know this one
        ({"verify_tls": False}, True),
    ],
)
def test_the_members_certificate_is_checked(
    tls_member: tuple[Demo, str, Path], hub_store: HubStore, member: dict[str, object], pulled: bool
) -> None:
    demo, url, ca = tls_member
    extra = {k: (ca if v == "CA" else v) for k, v in member.items()}
    settings = hub_settings(
        hub_store.schema, [{"name": "tls", "url": url, "token": demo.tokens["viewer"], **extra}]
    )
    assert HubPuller(settings, hub_store, AlwaysLeader()).pull_one(settings.members[0]) is pulled
    state = hub_store.members()["tls"]
    if pulled:
        assert state.last_success_at is not None
        assert hub_store.snapshots("overview")["tls"][1]["gpus"] == len(demo.steward.gpus)
    else:
        assert "CERTIFICATE_VERIFY_FAILED" in state.last_error
        assert state.last_success_at is None
