"""Listener, TLS, SASL and authorizer properties: parsing, per-listener overrides, errors that
name the key, JAAS values and ssl.principal.mapping.rules (Kafka's SslPrincipalMapper cases)."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, load_config
from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.principal import NoMatchingRuleError, PrincipalMapper, distinguished_name

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def cfg():
    return load_config(None, ["log.dirs=/tmp/x"])


def cfg_raw(*pairs):
    return load_config(None, ["log.dirs=/tmp/x", *pairs])


def test_several_listeners_by_name():
    c = cfg_raw(
        "listeners=PLAINTEXT://127.0.0.1:9092,SSL://:9093,SASL_SSL://[::1]:9094,INTERNAL://h:9095",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
        "INTERNAL:SASL_PLAINTEXT",
        "advertised.listeners=SSL://broker.example:19093",
        "ssl.keystore.type=PEM",
        "ssl.truststore.type=PEM",
        "ssl.keystore.location=/k.pem",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
    )
    names = [(x.name, x.protocol, x.host, x.port) for x in c.listeners]
    assert names == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        ("SSL", "SSL", "", 9093),
        ("SASL_SSL", "SASL_SSL", "::1", 9094),
        ("INTERNAL", "SASL_PLAINTEXT", "h", 9095),
    ]
    ssl_listener = c.listeners[1]
    assert (ssl_listener.advertised_host, ssl_listener.advertised_port) == (
        "broker.example",
        19093,
    )
    assert ssl_listener.tls.keystore_location == "/k.pem"
    assert c.listeners[3].tls is None and c.listeners[3].sasl_mechanisms == ("SCRAM-SHA-512",)
    # the first listener is also host/port
    assert (c.host, c.port, c.advertised_port) == ("127.0.0.1", 9092, 9092)


def test_per_listener_overrides_and_plain_users():
    c = cfg_raw(
        "listeners=SASL_PLAINTEXT://:1,SASL_SSL://:2",
        "sasl.enabled.mechanisms=SCRAM-SHA-256",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        "ssl.keystore.type=PEM",
        "ssl.truststore.type=PEM",
        "listener.name.sasl_ssl.ssl.keystore.location=/only-here.pem",
        "listener.name.sasl_ssl.ssl.client.auth=required",
        f'listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN} required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice=alice-pw;',
    )
    first, second = c.listeners
    assert first.sasl_mechanisms == ("SCRAM-SHA-256",) and dict(first.plain_users) == {}
    assert second.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert dict(second.plain_users) == {"admin": "admin-secret", "alice": "alice-pw"}
    assert second.tls.keystore_location == "/only-here.pem"
    assert second.tls.client_auth == "required"
    # secrets never show in the config's repr (log lines, tracebacks)
    assert "admin-secret" not in repr(c) and "alice-pw" not in repr(c)
    assert all("jaas" not in key for key in c.given)


def test_unprefixed_mechanism_jaas_applies_to_every_listener():
    c = cfg_raw(
        "listeners=SASL_PLAINTEXT://:1",
        "sasl.enabled.mechanisms=PLAIN",
        f'plain.sasl.jaas.config={PLAIN} required user_bob="b";',
    )
    assert dict(c.listeners[0].plain_users) == {"bob": "b"}


@pytest.mark.parametrize(
    "pairs,key,words",
    [
        (["listeners=SSL://:1"], "ssl.keystore.type", "PEM"),
        (
            ["listeners=SSL://:1", "ssl.keystore.type=PEM", "ssl.truststore.type=PEM"],
            "ssl.keystore.location",
            "key and certificate chain",
        ),
        (
            [
                "listeners=SSL://:1",
                "ssl.keystore.type=PEM",
                "ssl.truststore.type=PEM",
                "ssl.keystore.location=/k",
                "ssl.keystore.password=x",
            ],
            "ssl.keystore.password",
            "ssl.key.password",
        ),
        (["listeners=SASL_PLAINTEXT://:1"], "sasl.enabled.mechanisms", "GSSAPI"),
        (
            ["listeners=SASL_PLAINTEXT://:1", "sasl.enabled.mechanisms=PLAIN"],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "user_NAME",
        ),
        (["listeners=FOO://:1"], "listener.security.protocol.map", "FOO"),
        (["listeners=PLAINTEXT://:1,SSL://:1"], "listeners", "share a port"),
        (
            ["listeners=PLAINTEXT://:1", "sasl.jaas.config=x"],
            "sasl.jaas.config",
            "listener.name.<listener>",
        ),
        (
            ["listeners=PLAINTEXT://:1", "listener.name.ssl.ssl.client.auth=required"],
            "listener.name.ssl.ssl.client.auth",
            "no listener named SSL",
        ),
        (
            ["listeners=PLAINTEXT://:1", "listener.name.plaintext.log.dirs=/x"],
            "listener.name.plaintext.log.dirs",
            "cannot be set per listener",
        ),
        (["advertised.listeners=SSL://h:1"], "advertised.listeners", "not a listener"),
        (["ssl.client.auth=sometimes"], "ssl.client.auth", "requested"),
        (["ssl.enabled.protocols=TLSv1.1,TLSv1.2"], "ssl.enabled.protocols", "TLSv1.2"),
        (["sasl.enabled.mechanisms=KERBEROS"], "sasl.enabled.mechanisms", "KERBEROS"),
        (["authorizer.class.name=com.example.Mine"], "authorizer.class.name", "AclAuthorizer"),
        (["super.users=alice"], "super.users", "User:name"),
        (["ssl.principal.mapping.rules=RULE:[/x/"], "ssl.principal.mapping.rules", "rule"),
        (
            [
                "listeners=SASL_PLAINTEXT://:1",
                "sasl.enabled.mechanisms=PLAIN",
                f"plain.sasl.jaas.config={PLAIN} required user_a=b",
            ],
            "plain.sasl.jaas.config",
            "semicolon",
        ),
    ],
)
def test_bad_settings_name_the_key(pairs, key, words):
    with pytest.raises(ConfigError) as e:
        cfg_raw(*pairs)
    assert e.value.key.endswith(key.split(".", 3)[-1]) or e.value.key == key
    assert words in str(e.value)


def test_authorizer_settings():
    c = cfg_raw(
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:admin;User:CN=ops,O=Acme",
        "allow.everyone.if.no.acl.found=true",
    )
    assert c.security.authorizes
    assert c.security.super_users == {"User:admin", "User:CN=ops,O=Acme"}
    assert c.security.allow_everyone_if_no_acl_found
    assert not cfg().security.authorizes


# -- JAAS ----------------------------------------------------------------------------------


def test_jaas_syntax():
    module = parse_jaas_config(
        f'  {PLAIN}  Required /* comment */ user_a="x\\"y" // line comment\n'
        "user_b='single' user_c=bare-word_1.2 $weird=\"v\";"
    )
    assert module.name == PLAIN and module.flag == "required"
    assert dict(module.options) == {
        "user_a": 'x"y',
        "user_b": "single",
        "user_c": "bare-word_1.2",
        "$weird": "v",
    }
    assert module.plain_users() == {"a": 'x"y', "b": "single", "c": "bare-word_1.2"}
    assert "x" not in repr(module).replace(PLAIN, "").replace("required", "")


@pytest.mark.parametrize(
    "text",
    [
        "",
        PLAIN,
        f"{PLAIN} always;",
        f"{PLAIN} required user_a;",
        f"{PLAIN} required user_a=;",
        f'{PLAIN} required user_a="open;',
        f"{PLAIN} required; {PLAIN} required;",
    ],
)
def test_jaas_errors_never_echo_values(text):
    with pytest.raises(JaasError) as e:
        parse_jaas_config(text)
    assert "open" not in str(e.value)


# -- principals ----------------------------------------------------------------------------


def test_distinguished_name_is_rfc2253_last_rdn_first():
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc"),),
            (("organizationalUnitName", "eng"),),
            (("commonName", "alice"), ("userId", "a1")),
        )
    }
    assert distinguished_name(cert) == "CN=alice+UID=a1,OU=eng,O=Acme\\, Inc,C=US"


@pytest.mark.parametrize(
    "rules,dn,name",
    [
        # Kafka's SslPrincipalMapperTest cases
        ("DEFAULT", "CN=kafka1,OU=Apache,O=Kafka", "CN=kafka1,OU=Apache,O=Kafka"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "CN=duke,OU=ServiceUsers,O=Org", "duke"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "CN=Duke,OU=ServiceUsers,O=Org", "duke"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U", "CN=duke,OU=ServiceUsers,O=Org", "DUKE"),
        (
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, DEFAULT",
            "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US",
            "duke@javasoft",
        ),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/,DEFAULT",
            "CN=duke,OU=JavaSoft,O=Sun",
            "duke@JavaSoft",
        ),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$4/", "CN=a,OU=b", "a@$4"),
        ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L", "CN=Foo.Bar,O=x", "foo.bar"),
    ],
)
def test_principal_mapping_rules(rules, dn, name):
    assert PrincipalMapper(rules).name(dn) == name


def test_no_rule_applies():
    with pytest.raises(NoMatchingRuleError):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=only")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*?)/$1", "RULE:^CN=(.*?)/$1/LU", "DEFAULT, foo"])
def test_bad_rules(rules):
    with pytest.raises(ValueError):
        PrincipalMapper(rules)


def test_secured_example_config_loads():
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "config" / "server-secured.properties"
    c = load_config(str(example))
    by_name = {x.name: x for x in c.listeners}
    assert by_name["SASL_SSL"].sasl_mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
    assert by_name["SSL"].tls.client_auth == "required"
    assert by_name["SASL_SSL"].tls.client_auth == "none"
    assert c.security.authorizes and c.security.super_users == {"User:admin"}
    assert (
        PrincipalMapper(by_name["SSL"].principal_rules).name(
            "CN=orders-service,OU=services,O=Example"
        )
        == "orders-service"
    )


def test_kafka_inter_broker_and_tls_keys_are_accepted_and_checked():
    c = cfg_raw(
        "listeners=INTERNAL://:1,SASL_SSL://:2",
        "listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name=INTERNAL",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "sasl.enabled.mechanisms=PLAIN",
        f'plain.sasl.jaas.config={PLAIN} required user_a="b";',
        "ssl.keystore.type=PEM",
        "ssl.truststore.type=PEM",
        "ssl.keystore.location=/k",
        "ssl.protocol=TLSv1.2",
        "ssl.endpoint.identification.algorithm=",
    )
    assert [x.name for x in c.listeners] == ["INTERNAL", "SASL_SSL"]
    for pairs, key in (
        (["inter.broker.listener.name=NOPE"], "inter.broker.listener.name"),
        (["security.inter.broker.protocol=SSL"], "security.inter.broker.protocol"),
        (
            ["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT"],
            "inter.broker.listener.name",
        ),
        (["connections.max.reauth.ms=3600000"], "connections.max.reauth.ms"),
    ):
        with pytest.raises(ConfigError) as e:
            cfg_raw(*pairs)
        assert e.value.key == key
