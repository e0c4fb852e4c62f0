"""Kafka's ``sasl.jaas.config`` values, read as Kafka's JaasConfig reads them.

A value is one login module entry::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice=alice-pw;

the module's class name, a control flag (required, requisite, sufficient, optional), options
``key=value`` (the value a quoted string with Java escapes, or a bare word) and a semicolon.
``//`` and ``/* */`` comments are skipped, as Java's StreamTokenizer does. A broker's value holds
exactly one module (JaasContext.load). PlainLoginModule's ``user_NAME="password"`` options are
the users a PLAIN listener accepts (PlainServerCallbackHandler).

Errors raise :class:`JaasError`, whose message never repeats an option's value (they are
passwords).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

# A bare word as StreamTokenizer reads one with Kafka's settings: letters, '_', '-', '$' and
# (after the first character) digits and '.'.
_WORD = re.compile(r"[A-Za-z_$\-\u00a0-\u00ff][A-Za-z0-9_$.\-\u00a0-\u00ff]*")
_SPACE_OR_COMMENT = re.compile(r"(?:\s+|//[^\n\r]*|/\*.*?(?:\*/|$))+", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


class JaasError(ValueError):
    """Raised when a ``sasl.jaas.config`` value is not one well-formed login module entry.
    The message names the problem and the option key, never an option's value."""


@dataclass(frozen=True)
class LoginModule:
    """One parsed entry: its class, control flag and options (values are secrets: no repr)."""

    name: str
    flag: str
    options: Mapping[str, str] = field(repr=False)

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_NAME="password"`` options as {name: password}."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and k[5:]}


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: kind "word", "quoted" or the ordinary character itself."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _SPACE_OR_COMMENT.match(text, pos)
        if m:
            pos = m.end()
            continue
        ch = text[pos]
        if ch in "\"'":
            value, pos = _quoted(text, pos)
            out.append(("quoted", value))
            continue
        m = _WORD.match(text, pos)
        if m:
            out.append(("word", m.group()))
            pos = m.end()
            continue
        out.append((ch, ch))
        pos += 1
    return out


def _quoted(text: str, pos: int) -> tuple[str, int]:
    quote = text[pos]
    pos += 1
    chars: list[str] = []
    while pos < len(text):
        ch = text[pos]
        if ch == quote:
            return "".join(chars), pos + 1
        if ch in "\r\n":
            break  # StreamTokenizer ends a quoted string at a line end
        if ch == "\\" and pos + 1 < len(text):
            nxt = text[pos + 1]
            octal = re.match(r"[0-7]{1,3}", text[pos + 1 : pos + 4])
            if octal:
                digits = octal.group()
                if len(digits) == 3 and digits[0] > "3":
                    digits = digits[:2]
                chars.append(chr(int(digits, 8)))
                pos += 1 + len(digits)
                continue
            chars.append(_ESCAPES.get(nxt, nxt))
            pos += 2
            continue
        chars.append(ch)
        pos += 1
    raise JaasError("a quoted value is not closed before the end of its line")


def parse_jaas_config(text: str) -> LoginModule:
    """The single login module of a broker's ``sasl.jaas.config`` value; raises JaasError."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        kind, name = tokens[i]
        if kind not in ("word", "quoted"):
            raise JaasError(f"expected a login module class name, found {name!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise JaasError(f"login module {name}: control flag not specified")
        flag = tokens[i + 1][1].lower()
        if flag not in FLAGS:
            raise JaasError(
                f"login module {name}: invalid control flag {tokens[i + 1][1]!r} "
                f"(one of {', '.join(FLAGS)})"
            )
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = tokens[i][1]
            if (
                tokens[i][0] not in ("word", "quoted")
                or i + 2 >= len(tokens)
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "quoted")
            ):
                raise JaasError(f"login module {name}: value not specified for key {key!r}")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError(f"login module {name}: entry not terminated by a semicolon")
        i += 1
        modules.append(LoginModule(name, flag, MappingProxyType(options)))
    if not modules:
        raise JaasError("no login module given")
    if len(modules) != 1:
        raise JaasError(f"{len(modules)} login modules given; a broker's value holds exactly one")
    return modules[0]
