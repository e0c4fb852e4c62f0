"""A blocking Kafka client connection over protocol's sans-IO ClientConnection.

Shared by the command-line tools (``chronolog health``, ``chronolog groups``), the Spark source
and the tests: one plain TCP socket, one request at a time.
"""

from client.connection import BrokerConnection, BrokerConnectionError, ConnectError, error_name

__all__ = ["BrokerConnection", "BrokerConnectionError", "ConnectError", "error_name"]
