"""How the console shows keys, values and timestamps (broker/console/data.py)."""

from __future__ import annotations

from broker.console.data import Shown, format_ms, is_secret, show_bytes


def test_values_are_shown_as_json_text_hex_or_null():
    assert show_bytes(None) == Shown("null", "null")
    assert show_bytes(b'{"a":[1,2]}') == Shown("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert show_bytes(b"{not json") == Shown("text", "{not json")
    assert show_bytes("café <b>".encode()) == Shown("text", "café <b>")
    assert show_bytes(b"\xff\x00a") == Shown("hex", "ff 00 61")


def test_timestamps_are_utc_with_milliseconds():
    assert format_ms(1_700_000_000_123) == "2023-11-14 22:13:20.123 UTC"
    assert format_ms(-1) == "none"


def test_secret_names_are_recognised():
    assert is_secret("sasl.jaas.password") and is_secret("ssl.SECRET.key")
    assert not is_secret("log.dirs")
