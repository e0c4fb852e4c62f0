"""chronolog's broker: the trio server, request handlers, configuration and the CLI.

Handlers follow ``async def handler(ctx: BrokerContext, request) -> dict | None`` and are
dispatched through ``broker.handlers.HANDLERS``. Importing this package stays cheap: the server
modules load on first use.
"""

from broker.config import BrokerConfig, ConfigError, TopicConfig, load_config
from broker.errors import CloseConnectionError

__all__ = ["BrokerConfig", "ConfigError", "TopicConfig", "load_config", "CloseConnectionError"]
