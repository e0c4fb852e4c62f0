#!/bin/sh
# Entrypoint of the compose file's broker-secure service: at every start it makes what a
# secured broker needs and that must never be in an image or a repository, then runs the
# service's command (the broker):
#   - a CA and the broker's certificate (for broker-secure, localhost and 127.0.0.1) in $TLS_DIR,
#     the broker's keystore being its key followed by the chain (PEM, KIP-651);
#   - a random password for the SCRAM user "runner" ($TLS_DIR/runner.password), whose
#     credentials are added to the broker's credential file (salted, iterated).
# The test runner mounts $TLS_DIR to trust the CA and log in. Files are private (umask 077).
set -eu
TLS_DIR=${TLS_DIR:-/tls}
LOG_DIR=${LOG_DIR:-/var/lib/chronolog}
umask 077
if [ ! -s "$TLS_DIR/ca.pem" ] || [ ! -s "$TLS_DIR/broker-keystore.pem" ]; then (
  cd "$TLS_DIR"
  ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  # shellcheck disable=SC2086
  openssl req -x509 $ec -days 30 -keyout ca.key -out ca.pem -subj "/CN=chronolog compose CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    2>/dev/null
  # shellcheck disable=SC2086
  openssl req $ec -keyout broker.key -out broker.csr -subj "/CN=broker-secure" 2>/dev/null
  printf 'subjectAltName=DNS:broker-secure,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    > broker.ext
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
    -extfile broker.ext -out broker.crt 2>/dev/null
  cat broker.key broker.crt ca.pem > broker-keystore.pem
  rm -f broker.csr broker.ext ca.key ca.srl  # nothing can sign another certificate later
  echo "secure-entrypoint: made a CA and the broker's certificate in $TLS_DIR"
) fi
if [ ! -s "$TLS_DIR/runner.password" ]; then
  python -c 'import secrets; print(secrets.token_urlsafe(24))' > "$TLS_DIR/runner.password"
fi
chronolog users --log-dir "$LOG_DIR" add runner --password-stdin < "$TLS_DIR/runner.password" \
  >/dev/null
echo "secure-entrypoint: SCRAM user runner ready"
exec "$@"
