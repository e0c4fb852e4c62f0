"""Principals: ``User:name`` from SASL, or from a TLS client certificate's subject.

A certificate's subject is rendered as Java's ``X500Principal.getName()`` does (RFC 2253: the
last RDN first, ``CN=alice,OU=eng,O=Acme,C=US``), then mapped by ``ssl.principal.mapping.rules``
as Kafka's SslPrincipalMapper does: rules ``RULE:pattern/replacement/[LU]`` and ``DEFAULT`` (the
distinguished name itself), tried in order; the first whose pattern matches the whole name
gives the principal name (``$1`` back references, optionally lower- or upper-cased). Attributes
Java names by keyword (CN, C, L, ST, O, OU, STREET, DC, UID) are written so; others by their
OpenSSL long name (Java writes an OID and hex DER there: a deliberate departure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

ANONYMOUS = "User:ANONYMOUS"

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)

_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


class NoMatchingRuleError(ValueError):
    """Raised when no ``ssl.principal.mapping.rules`` rule applies to a distinguished name (the
    TLS connection is then refused, as Kafka refuses it)."""


def _escape(value: str) -> str:
    """An attribute value escaped as RFC 2253 requires."""
    out = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peercert: dict[str, Any]) -> str:
    """The RFC 2253 subject of an ``ssl`` peer certificate dict (``getpeercert()``)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _java_replacement(replacement: str, groups: int) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement function doing what Java's Matcher.replaceAll does with
    ``replacement`` (``$n`` group references, ``\\x`` literals), after Kafka's rewriting of
    references to groups that do not exist into literals."""
    parts: list[str | int] = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            parts.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            digits = re.match(r"\d+", replacement[i + 1 :]).group()  # type: ignore[union-attr]
            number = int(digits)
            used = len(digits)
            while number > groups and used > 1:
                number //= 10
                used -= 1
            if number > groups:
                parts.append("$")  # Kafka escapes a reference to a missing group: a literal
                i += 1
                continue
            parts.append(number)
            i += 1 + used
        else:
            parts.append(ch)
            i += 1

    def expand(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

    return expand


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )


class PrincipalMapper:
    """``ssl.principal.mapping.rules``; raises ValueError for a rule that does not parse."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(rules.strip() or "DEFAULT"):
            rule = m.group(1)
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ValueError(f"invalid rule {rule!r}")
            if parsed.group(1):
                self.rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"invalid rule {rule!r}: {exc}") from None
                self.rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))
            elif parsed.group(5):
                raise ValueError(f"invalid rule {rule!r}")

    def name(self, dn: str) -> str:
        """The principal name for ``dn``; NoMatchingRuleError when no rule applies."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRuleError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
