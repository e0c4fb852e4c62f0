"""Server-side TLS contexts from a listener's PEM stores (KIP-651), TLS 1.2 and later only.

``ssl.client.auth``: none (no client certificate asked), requested (asked; a connection without
one is served as User:ANONYMOUS, one with an untrusted certificate is refused), required (no
trusted certificate, no connection). Client certificates chain to ``ssl.truststore.location``'s
CAs, or to the system's when none is given (Kafka falls back to the JVM's trust store).
"""

from __future__ import annotations

import ssl

from broker.security.settings import TlsSettings

_VERIFY = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsSetupError(Exception):
    """Raised at start-up when a listener's key, certificate chain or trust store cannot be
    loaded; the message names the file and what to check (never the key's password)."""


def server_context(listener: str, settings: TlsSettings) -> ssl.SSLContext:
    """The SSLContext a TLS listener wraps its connections in; raises TlsSetupError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[p] for p in settings.protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE

    def no_password() -> bytes:
        # Without this OpenSSL would ask for the pass phrase on the terminal and wait.
        raise TlsSetupError(
            f"listener {listener}: the private key in ssl.keystore.location "
            f"{settings.keystore_location!r} is encrypted; set ssl.key.password"
        )

    try:
        context.load_cert_chain(
            settings.keystore_location, password=settings.key_password or no_password
        )
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(
            f"listener {listener}: cannot load the key and certificate chain from "
            f"ssl.keystore.location {settings.keystore_location!r}: {_reason(exc)}; the file "
            "must hold the PEM private key (encrypted with ssl.key.password, or not) and the "
            "certificate chain"
        ) from None
    context.verify_mode = _VERIFY[settings.client_auth]
    if settings.client_auth != "none":
        try:
            if settings.truststore_location:
                context.load_verify_locations(cafile=settings.truststore_location)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(
                f"listener {listener}: cannot load the CA certificates from "
                f"ssl.truststore.location {settings.truststore_location!r}: {_reason(exc)}"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
