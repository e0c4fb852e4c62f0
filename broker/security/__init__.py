"""Security: listeners by Kafka's names, TLS, SASL authentication and ACL authorization.

- :mod:`.listeners`: the listener table (``listeners``, ``advertised.listeners``,
  ``listener.security.protocol.map`` and ``listener.name.<name>.*`` overrides), TLS contexts from
  PEM stores, the principal of a TLS client certificate (``ssl.principal.mapping.rules``).
- :mod:`.jaas`: Kafka's ``sasl.jaas.config`` syntax (PlainLoginModule's ``user_NAME``).
- :mod:`.scram`: SCRAM-SHA-256/512 (RFC 5802/7677) credentials and the server's exchange.
- :mod:`.sasl`: the per-connection SASL state machine (KIP-152 handshake and authenticate, or
  the v0 handshake followed by raw token frames) and the PLAIN and SCRAM mechanisms, sans-IO.
- :mod:`.credentials`: the SCRAM credential file (0600, salted and iterated, never in clear).
- :mod:`.acls`, :mod:`.authorizer`: ACL bindings, their store (a file; ZooKeeper in a cluster),
  and AclAuthorizer's decisions.
- :mod:`.gate`: what the server calls per connection and per request: authentication state,
  the per-api authorization rules, the listener a client came in on.
"""
