"""The dispatch table: ``HANDLERS[api_key] -> async def handler(ctx, request) -> dict | None``
(a :data:`Handler`; None: no response, as for a Produce with acks=0).

The group apis come from ``broker.groups.handlers.GROUP_HANDLERS``, the SASL, ACL and SCRAM
credential apis from ``broker.security.handlers.SECURITY_HANDLERS``, the transaction apis from
``broker.txn.handlers.TXN_HANDLERS``; ApiVersions advertises
exactly the keys in the final table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from broker.context import BrokerContext
from broker.groups.handlers import GROUP_HANDLERS
from broker.handlers.admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from broker.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker.handlers.client_quotas import (
    handle_alter_client_quotas,
    handle_describe_client_quotas,
)
from broker.handlers.cluster import (
    handle_alter_replica_log_dirs,
    handle_describe_cluster,
    handle_describe_log_dirs,
)
from broker.handlers.delete_records import handle_delete_records
from broker.handlers.describe_producers import handle_describe_producers
from broker.handlers.features import handle_update_features
from broker.handlers.elections import (
    handle_alter_partition_reassignments,
    handle_elect_leaders,
    handle_list_partition_reassignments,
)
from broker.handlers.fetch import handle_fetch, release as release_fetch_body
from broker.handlers.leader_epochs import handle_offset_for_leader_epoch
from broker.handlers.api_versions import make_api_versions_handler
from broker.handlers.metadata import handle_describe_topic_partitions, handle_metadata
from broker.handlers.list_offsets import handle_list_offsets
from broker.handlers.produce import handle_produce
from broker.handlers.producer_ids import handle_init_producer_id
from broker.security.handlers import SECURITY_HANDLERS
from broker.txn.handlers import TXN_HANDLERS
from protocol.api import ApiKey, Request

Handler: TypeAlias = Callable[[BrokerContext, Request], Awaitable[dict[str, Any] | None]]
"""One api's handler: the response body for ``request``, or None for no response."""

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
    ApiKey.UPDATE_FEATURES: handle_update_features,
}

HANDLERS.update(GROUP_HANDLERS)
HANDLERS.update(SECURITY_HANDLERS)
HANDLERS.update(TXN_HANDLERS)

HANDLERS[ApiKey.API_VERSIONS] = make_api_versions_handler(HANDLERS)

__all__ = ["HANDLERS", "Handler", "release_fetch_body"]
