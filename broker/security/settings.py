"""The listener table and the security settings, from Kafka's property names.

``listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9094`` names each listener and its address;
``listener.security.protocol.map`` gives each name its security protocol (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL; Kafka's default maps each of those names to itself);
``advertised.listeners`` the address Metadata gives clients that came in on it (a listener it
does not name advertises its own address). TLS and SASL settings are the broker-wide ``ssl.*`` /
``sasl.enabled.mechanisms``, overridden per listener by ``listener.name.<name>.<key>`` (the name
in lower case, as Kafka's ListenerName.configPrefix). PLAIN users come from
``listener.name.<name>.plain.sasl.jaas.config`` (or the unprefixed ``plain.sasl.jaas.config``
that applies to every listener, as Kafka's valuesWithPrefixOverride allows).

Deliberate departures from Kafka: a bare ``sasl.jaas.config`` (Kafka warns and ignores it) and a
``listener.name.<name>.*`` key for a listener that does not exist (Kafka ignores it) are
refused, so a secured listener is never silently left without its users; SCRAM mechanisms need
no JAAS entry (their credentials live in the broker's credential file); only PEM stores
(KIP-651) are read, so ``ssl.keystore.type``/``ssl.truststore.type`` must be PEM on a TLS
listener; GSSAPI and OAUTHBEARER are not implemented.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from broker.security.jaas import PLAIN_MODULE, SCRAM_MODULE, JaasError, parse_jaas_config
from broker.security.principal import PrincipalMapper

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms chronolog implements."""
KNOWN_MECHANISMS = MECHANISMS + ("GSSAPI", "OAUTHBEARER")
AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)
"""authorizer.class.name values that enable ACLs (Kafka's ZooKeeper-mode and KRaft names)."""

LISTENER_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms",
)
"""Broker properties a ``listener.name.<name>.`` prefix may override."""

_LISTENER_NAME = re.compile(r"[A-Za-z0-9_]+")
_ENTRY = re.compile(r"(?:([A-Za-z0-9_]+)://)?(\[[^\]\s/]*\]|[^:\s/\[\]]*):(\d+)")
_JAAS_KEY = re.compile(r"([a-z0-9-]+)\.sasl\.jaas\.config")
_PREFIXED = re.compile(r"listener\.name\.([^.]+)\.(.+)")


class SettingsError(ValueError):
    """Raised for an invalid security or listener setting; ``key`` names the property."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def parse_listener_list(value: str) -> tuple[tuple[str, str, int], ...]:
    """``NAME://host:port,...`` as ((NAME, host, port), ...); names upper-cased, an entry
    without a name is PLAINTEXT, IPv6 hosts in brackets. Raises ValueError(reason)."""
    entries: list[tuple[str, str, int]] = []
    for raw in (part.strip() for part in value.split(",")):
        if not raw:
            continue
        m = _ENTRY.fullmatch(raw)
        if not m:
            raise ValueError(f"{raw!r} is not of the form NAME://host:port")
        name = (m.group(1) or "PLAINTEXT").upper()
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is out of range [0, 65535]")
        if any(name == e[0] for e in entries):
            raise ValueError(f"listener name {name} is given twice")
        entries.append((name, m.group(2).strip("[]"), port))
    if not entries:
        raise ValueError("no listener given")
    return tuple(entries)


def parse_protocol_map(value: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` as {NAME: PROTOCOL}; raises ValueError(reason)."""
    result: dict[str, str] = {}
    for raw in (part.strip() for part in value.split(",")):
        if not raw:
            continue
        name, sep, protocol = raw.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise ValueError(f"{raw!r} is not of the form NAME:PROTOCOL")
        if protocol not in PROTOCOLS:
            raise ValueError(f"{protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if name in result:
            raise ValueError(f"listener name {name} is mapped twice")
        result[name] = protocol
    return result


def parse_mechanisms(value: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``: a list of mechanism names, upper-cased."""
    names = tuple(dict.fromkeys(p.strip().upper() for p in value.split(",") if p.strip()))
    unknown = [n for n in names if n not in KNOWN_MECHANISMS]
    if unknown:
        raise ValueError(f"unknown SASL mechanism {unknown[0]!r}")
    return names


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: ``User:alice;User:bob`` (Kafka separates them with semicolons)."""
    users = frozenset(p.strip() for p in value.split(";") if p.strip())
    bad = [u for u in users if ":" not in u]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a principal of the form User:name")
    return users


def parse_authorizer(value: str) -> str:
    if value and value not in AUTHORIZERS:
        raise ValueError(
            f"{value!r} is not supported; use one of {', '.join(AUTHORIZERS)} (or leave it "
            "empty for no authorization)"
        )
    return value


def parse_protocols(value: str) -> tuple[str, ...]:
    """``ssl.enabled.protocols``: TLSv1.2 and/or TLSv1.3 (older versions are refused)."""
    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    bad = [n for n in names if n not in ("TLSv1.2", "TLSv1.3")]
    if bad or not names:
        raise ValueError(f"{bad[0] if bad else value!r}: chronolog serves TLSv1.2 and TLSv1.3 only")
    return names


def parse_reauth(value: int) -> int:
    """``connections.max.reauth.ms``: 0 only (KIP-368 re-authentication is not offered)."""
    if value != 0:
        raise ValueError(
            "re-authentication (KIP-368) is not supported; leave it at 0 (sessions never expire)"
        )
    return value


def parse_principal_rules(value: str) -> str:
    PrincipalMapper(value)  # raises ValueError for a bad rule
    return value


@dataclass(frozen=True)
class TlsSettings:
    """A TLS listener's stores. ``keystore_location``: a PEM file with the private key (PKCS#8,
    encrypted with ``key_password`` or not) and the certificate chain; ``truststore_location``:
    PEM CA certificates that client certificates must chain to (None: the system's)."""

    keystore_location: str
    key_password: str | None = field(repr=False)
    truststore_location: str | None
    client_auth: str
    protocols: tuple[str, ...]


@dataclass(frozen=True)
class Listener:
    """One configured listener. ``port`` 0 picks a free port at start (the server then puts the
    bound one here, and in ``advertised_port`` unless that was given)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), repr=False, compare=False
    )
    principal_rules: str = "DEFAULT"

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SecuritySettings:
    """Broker-wide authentication and authorization settings."""

    authorizer: str = ""
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    failed_authentication_delay_ms: int = 100

    @property
    def authorizes(self) -> bool:
        """Whether ACLs are enforced (``authorizer.class.name`` names an authorizer)."""
        return bool(self.authorizer)


def is_dynamic_key(name: str) -> bool:
    """Whether ``name`` is a listener-prefixed or mechanism-prefixed property, whose names
    the key table cannot list."""
    return (
        name.startswith("listener.name.")
        or name == "sasl.jaas.config"
        or bool(_JAAS_KEY.fullmatch(name))
    )


def resolve(
    values: Mapping[str, Any],
    given: Iterable[str],
    dynamic: Iterable[tuple[str, str]],
    parse: Callable[[str, str], Any],
) -> tuple[tuple[Listener, ...], SecuritySettings]:
    """The listeners and security settings from the typed broker ``values`` (by property name;
    defaults included), the names ``given`` explicitly, the ``dynamic`` (name, raw) pairs that
    :func:`is_dynamic_key` accepted, and ``parse(name, raw)`` that types a broker property.
    Raises SettingsError naming the offending property."""
    given = set(given)
    listeners = values["listeners"]
    if isinstance(listeners, str):
        listeners = parse_listener_list(listeners)
    advertised = values["advertised.listeners"]
    if isinstance(advertised, str):
        advertised = parse_listener_list(advertised)
    protocol_map = parse_protocol_map(values["listener.security.protocol.map"])
    names = {name for name, _, _ in listeners}
    by_listener: dict[str, dict[str, Any]] = {name: {} for name in names}
    jaas: dict[str, dict[str, str]] = {name: {} for name in names}
    shared_jaas: dict[str, str] = {}
    for key, raw in dynamic:
        if key == "sasl.jaas.config":
            raise SettingsError(
                key,
                "a broker's JAAS config names its listener and mechanism: use "
                "listener.name.<listener>.<mechanism>.sasl.jaas.config, e.g. "
                "listener.name.sasl_ssl.plain.sasl.jaas.config",
            )
        m = _PREFIXED.fullmatch(key)
        if m is None:
            shared_jaas[_jaas_mechanism(key)] = raw
            continue
        listener, rest = m.group(1).upper(), m.group(2)
        if listener not in names:
            raise SettingsError(key, f"there is no listener named {listener} in listeners")
        if _JAAS_KEY.fullmatch(rest):
            jaas[listener][_jaas_mechanism(key, rest)] = raw
        elif rest in LISTENER_KEYS:
            by_listener[listener][rest] = parse(key, raw)
        else:
            raise SettingsError(key, f"{rest} cannot be set per listener (or is unknown)")
    adv = {name: (host, port) for name, host, port in advertised or ()}
    unknown = [name for name in adv if name not in names]
    if unknown:
        raise SettingsError(
            "advertised.listeners", f"{unknown[0]} is not a listener named in listeners"
        )
    ports = [port for _, _, port in listeners if port]
    if len(ports) != len(set(ports)):
        raise SettingsError("listeners", "two listeners share a port")
    result = []
    for name, host, port in listeners:
        protocol = protocol_map.get(name)
        if protocol is None:
            raise SettingsError(
                "listener.security.protocol.map",
                f"listener {name} has no security protocol; add {name}:PROTOCOL",
            )
        adv_host, adv_port = adv.get(name, (host, port))
        if adv_host in ("", "0.0.0.0", "::"):
            if name in adv:
                raise SettingsError("advertised.listeners", "must name a host clients can reach")
            adv_host = socket.getfqdn()
        if name in adv and adv_port == 0:
            raise SettingsError("advertised.listeners", "port 0 cannot be advertised")

        def get(key: str, listener: str = name) -> Any:
            return by_listener[listener].get(key, values[key])

        result.append(
            Listener(
                name=name,
                protocol=protocol,
                host=host,
                port=port,
                advertised_host=adv_host,
                advertised_port=adv_port,
                tls=_tls(name, get) if protocol in ("SSL", "SASL_SSL") else None,
                sasl_mechanisms=(
                    _mechanisms(name, get) if protocol in ("SASL_PLAINTEXT", "SASL_SSL") else ()
                ),
                plain_users=MappingProxyType(
                    _plain_users(name, get, {**shared_jaas, **jaas[name]})
                    if protocol in ("SASL_PLAINTEXT", "SASL_SSL")
                    else {}
                ),
                principal_rules=get("ssl.principal.mapping.rules"),
            )
        )
    _check_inter_broker(values, given, names, protocol_map)
    security = SecuritySettings(
        authorizer=values["authorizer.class.name"],
        super_users=parse_super_users(values["super.users"]),
        allow_everyone_if_no_acl_found=values["allow.everyone.if.no.acl.found"],
        failed_authentication_delay_ms=values["connection.failed.authentication.delay.ms"],
    )
    return tuple(result), security


def _check_inter_broker(
    values: Mapping[str, Any], given: set[str], names: set[str], protocol_map: dict[str, str]
) -> None:
    """Kafka's checks of the inter-broker listener (KafkaConfig): not both ways of naming it,
    and a listener that exists (by name, or one with the protocol)."""
    name = values["inter.broker.listener.name"]
    if name is not None and "security.inter.broker.protocol" in given:
        raise SettingsError(
            "inter.broker.listener.name",
            "set inter.broker.listener.name or security.inter.broker.protocol, not both",
        )
    if name is not None:
        if name.upper() not in names:
            raise SettingsError("inter.broker.listener.name", f"no listener named {name}")
    elif "security.inter.broker.protocol" in given:
        protocol = values["security.inter.broker.protocol"]
        if not any(protocol_map.get(n) == protocol for n in names):
            raise SettingsError("security.inter.broker.protocol", f"no listener uses {protocol}")


def _jaas_mechanism(key: str, rest: str | None = None) -> str:
    m = _JAAS_KEY.fullmatch(rest if rest is not None else key)
    assert m is not None
    mechanism = m.group(1).upper()
    if mechanism not in KNOWN_MECHANISMS:
        raise SettingsError(key, f"unknown SASL mechanism {mechanism!r}")
    return mechanism


def _tls(name: str, get: Callable[[str], Any]) -> TlsSettings:
    prefix = f"listener.name.{name.lower()}."
    for store in ("keystore", "truststore"):
        if get(f"ssl.{store}.type") != "PEM":
            raise SettingsError(
                f"ssl.{store}.type",
                f"listener {name}: chronolog reads PEM stores only; set ssl.{store}.type=PEM "
                f"(or {prefix}ssl.{store}.type=PEM)",
            )
        if get(f"ssl.{store}.password") is not None:
            raise SettingsError(
                f"ssl.{store}.password",
                f"listener {name}: a PEM store has no store password (the private key's is "
                "ssl.key.password)",
            )
    location = get("ssl.keystore.location")
    if not location:
        raise SettingsError(
            "ssl.keystore.location",
            f"listener {name} uses TLS: set ssl.keystore.location (or "
            f"{prefix}ssl.keystore.location) to a PEM file with the key and certificate chain",
        )
    return TlsSettings(
        keystore_location=location,
        key_password=get("ssl.key.password"),
        truststore_location=get("ssl.truststore.location"),
        client_auth=get("ssl.client.auth"),
        protocols=parse_protocols(get("ssl.enabled.protocols")),
    )


def _mechanisms(name: str, get: Callable[[str], Any]) -> tuple[str, ...]:
    mechanisms = parse_mechanisms(get("sasl.enabled.mechanisms"))
    unsupported = [m for m in mechanisms if m not in MECHANISMS]
    if unsupported or not mechanisms:
        raise SettingsError(
            "sasl.enabled.mechanisms",
            f"listener {name}: {', '.join(unsupported) or 'no mechanism'} is not supported; "
            f"enable some of {', '.join(MECHANISMS)} (sasl.enabled.mechanisms or "
            f"listener.name.{name.lower()}.sasl.enabled.mechanisms)",
        )
    return mechanisms


def _plain_users(name: str, get: Callable[[str], Any], jaas: Mapping[str, str]) -> dict[str, str]:
    users: dict[str, str] = {}
    for mechanism in _mechanisms(name, get):
        key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        text = jaas.get(mechanism)
        if text is None:
            if mechanism == "PLAIN":
                raise SettingsError(
                    key,
                    f"listener {name} enables PLAIN but has no JAAS config naming its users; "
                    f'set {key}={PLAIN_MODULE} required user_NAME="password";',
                )
            continue
        try:
            module = parse_jaas_config(text)
        except JaasError as exc:
            raise SettingsError(key, str(exc)) from None
        expected = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        if module.name != expected:
            raise SettingsError(key, f"{mechanism} needs the login module {expected}")
        if mechanism == "PLAIN":
            users = module.plain_users()
    return users
