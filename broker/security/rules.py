"""Per-api authorization, as Kafka's KafkaApis checks each request (3.9's rules, 4.1's for the
transaction apis), at the dispatch level. Refusals are shaped as Kafka 4.1.1 sends them: empty,
never null, where Kafka's are empty (a refused Fetch partition's records), and error texts set
or null where Kafka's are (tests/integration/test_differential_errors.py compares them).

:data:`RULES` maps every api key to a rule ``async (check, handler, ctx, request) -> body``. A
rule either answers the whole request with an error without calling the handler (a group api
without READ on its group: GROUP_AUTHORIZATION_FAILED), or hands the handler the request
without the entries the principal may not touch and adds those back to the handler's answer
with the error Kafka gives them (a Produce to a topic without WRITE: TOPIC_AUTHORIZATION_FAILED
on each of its partitions, nothing stored), or filters the answer (Metadata lists only the
topics the principal may DESCRIBE; ListGroups only the groups). Handlers stay unaware of
authorization, so the apis other modules serve are covered by the table alone; every api key
has a rule (a test checks), and an api without one would be refused.

Deliberate departure: a fetch session (KIP-227) only ever holds partitions that were
authorized when added; an ACL removed later is enforced on the session's next full fetch,
not on its incremental ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable

import structlog

from broker.errors import CloseConnectionError
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from broker.security.authorizer import Authorizer
from broker.security.session import Session
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode
from protocol.schemas.codec import Body

logger = structlog.get_logger(__name__)

Handler = Callable[[Any, Request], Awaitable[Any]]
# A rule: ``async (check, handler, ctx, request) -> body``, the handler called or not.
Rule = Callable[["Check", Handler, Any, Request], Awaitable[Any]]

TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
NOT_REQUESTED = -2147483648  # authorized operations not asked for
NOT_ATTEMPTED = int(ErrorCode.OPERATION_NOT_ATTEMPTED)
# What Kafka's Errors.message() says for the refusals Kafka 4.1 answers with a text
_DENIED_MESSAGE = {
    TOPIC_DENIED: "Topic authorization failed.",
    GROUP_DENIED: "Group authorization failed.",
    CLUSTER_DENIED: "Cluster authorization failed.",
    TXN_DENIED: "Transactional Id authorization failed.",
}


def _cluster_denied_message(operation: Operation) -> str:
    """The text of a refused cluster operation (Kafka's names the request and the operation)."""
    return f"Cluster authorization failed: the principal needs {operation.name} on the cluster."


class Check:
    """One request's decisions for one session (each resource asked once per request), with
    one log line per refusal."""

    def __init__(self, authorizer: Authorizer, session: Session, api: ApiKey) -> None:
        self.authorizer = authorizer
        self.session = session
        self.api = api
        self._seen: dict[tuple[Operation, ResourceType, str], bool] = {}

    def __call__(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        key = (operation, resource_type, name)
        decision = self._seen.get(key)
        if decision is None:
            decision = self._seen[key] = self.authorizer.authorize(
                self.session.principal, self.session.host, operation, resource_type, name
            )
            if not decision:
                logger.info(
                    "authorization denied",
                    principal=self.session.principal,
                    host=self.session.host,
                    operation=operation.name,
                    resource=f"{resource_type.name}:{name}",
                    api=self.api.name,
                )
        return decision

    def cluster(self, operation: Operation) -> bool:
        return self(operation, CLUSTER, CLUSTER_NAME)

    def any_topic(self, operation: Operation) -> bool:
        return self.authorizer.authorize_any(
            self.session.principal, self.session.host, operation, TOPIC
        )

    def operations(self, resource_type: ResourceType, name: str) -> int:
        return self.authorizer.authorized_operations(
            self.session.principal, self.session.host, resource_type, name
        )


def _with(request: Request, **fields: Any) -> Request:
    """The request with some body fields replaced."""
    body = Body(request.body)
    body.update(fields)
    return dataclasses.replace(request, body=body)


def _v(request: Request) -> int:
    version: int = request.header.api_version
    return version


# -- generic rules --------------------------------------------------------------------------


async def allowed(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """No authorization (ApiVersions, the SASL apis)."""
    return await handler(ctx, request)


def cluster_rule(operation: Operation, error: Callable[[Request], dict[str, Any]]) -> Rule:
    """The whole request needs ``operation`` on the cluster; else ``error(request)``."""

    async def rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
        if not check.cluster(operation):
            return error(request)
        return await handler(ctx, request)

    return rule


def group_rule(
    operation: Operation, error: Callable[[Request], dict[str, Any]], resource: ResourceType = GROUP
) -> Rule:
    """The whole request needs ``operation`` on its group_id (or, for TRANSACTIONAL_ID, its
    transactional_id)."""
    field = "transactional_id" if resource == TXN else "group_id"

    async def rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
        if not check(operation, resource, request.body[field]):
            return error(request)
        return await handler(ctx, request)

    return rule


def _name(entry: Any) -> str:
    name: str = entry["name"]
    return name


async def _split_topics(
    check: Check,
    handler: Handler,
    ctx: Any,
    request: Request,
    operation: Operation,
    denied_entry: Callable[[Any], dict[str, Any]],
    *,
    field: str = "topics",
    name_of: Callable[[Any], str | None] = _name,
    response_field: str = "topics",
) -> Any:
    """Hand the handler only the ``field`` entries whose topic allows ``operation``; add
    ``denied_entry(entry)`` for the others to the answer's ``response_field`` list."""
    allowed_entries: list[Any] = []
    denied: list[Any] = []
    for entry in request.body[field]:
        name = name_of(entry)
        (allowed_entries if name is None or check(operation, TOPIC, name) else denied).append(entry)
    if not denied:
        return await handler(ctx, request)
    body = await handler(ctx, _with(request, **{field: allowed_entries}))
    if body is not None:
        body.setdefault(response_field, [])
        body[response_field] = list(body[response_field]) + [denied_entry(e) for e in denied]
    return body


def _refused_partitions(
    topic: str, index: str, partitions: str = "partitions", **answer: Any
) -> Callable[[Any], dict[str, Any]]:
    """The answer to a refused topic entry of the request: its ``topic`` and, under
    ``partitions``, ``{index: i, **answer}`` for each of its partitions (given in the request
    as indexes, or as entries with the same ``index`` key)."""

    def entry(e: Any) -> dict[str, Any]:
        return {
            topic: e[topic],
            partitions: [
                {index: p if isinstance(p, int) else p[index], **answer}
                for p in e[_partition_field(e)]
            ],
        }

    return entry


def _topics_rule(
    operation: Operation,
    denied_entry: Callable[[Any], dict[str, Any]],
    response_field: str = "topics",
) -> Rule:
    """``operation`` on each topic of the request's ``topics`` (by name), answering each
    refused one ``denied_entry(entry)`` in the answer's ``response_field``."""

    async def rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
        return await _split_topics(
            check, handler, ctx, request, operation, denied_entry, response_field=response_field
        )

    return rule


def _partition_field(entry: Any) -> str:
    for name in ("partitions", "partition_data", "partition_indexes"):
        if name in entry:
            return name
    raise KeyError("partitions")


# -- per-api rules --------------------------------------------------------------------------


async def produce_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """KafkaApis.handleProduceRequest: WRITE on the transactional id when given, then WRITE on
    each topic, by name or by id from v13 (TOPIC_AUTHORIZATION_FAILED per partition, nothing
    stored)."""
    txn = request.body.get("transactional_id")

    def denied(code: int) -> Callable[[Any], dict[str, Any]]:
        refused = _refused_partitions(
            "name",
            "index",
            "partition_responses",
            error_code=code,
            base_offset=-1,
            log_append_time_ms=-1,
            log_start_offset=-1,
        )
        return lambda e: {**refused(e), "topic_id": e["topic_id"]}

    def name_of(entry: Any) -> str | None:
        if _v(request) >= 13:
            topic = ctx.topics.by_id(entry["topic_id"])
            return topic.name if topic is not None else None  # unknown ids: the handler's
        name: str = entry["name"]
        return name

    if request.body.acks == 0 and (
        (txn is not None and not check(Operation.WRITE, TXN, txn))
        or not all(
            (name := name_of(e)) is None or check(Operation.WRITE, TOPIC, name)
            for e in request.body.topic_data
        )
    ):
        # Kafka answers an acks=0 produce with an error by closing the connection.
        raise CloseConnectionError("acks=0 produce refused: not authorized (see the log)")
    if txn is not None and not check(Operation.WRITE, TXN, txn):
        return {"responses": [denied(TXN_DENIED)(e) for e in request.body.topic_data]}
    return await _split_topics(
        check,
        handler,
        ctx,
        request,
        Operation.WRITE,
        denied(TOPIC_DENIED),
        field="topic_data",
        name_of=name_of,
        response_field="responses",
    )


def _fetch_denied(e: Any) -> dict[str, Any]:
    """A refused Fetch topic as Kafka 4.1's FetchResponse.partitionResponse answers each of its
    partitions: an empty record set and an empty aborted-transaction list, never null (librdkafka
    reads a null record set as a broken answer and retries forever)."""
    return {
        "topic": e.get("topic") or "",
        "topic_id": e.get("topic_id"),
        "partitions": [
            {
                "partition_index": p["partition"],
                "error_code": TOPIC_DENIED,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [],
                "preferred_read_replica": -1,
                "records": b"",
            }
            for p in e["partitions"]
        ],
    }


async def fetch_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """READ on each topic (by name, or by id from v13); a follower's fetch needs
    CLUSTER_ACTION and nothing else (KafkaApis.handleFetchRequest: replication does not depend
    on topic ACLs), else every partition is TOPIC_AUTHORIZATION_FAILED."""
    body = request.body
    # v15+ carries the follower in replica_state; below it replica_state is only a default
    replica = body.replica_state["replica_id"] if _v(request) >= 15 else body.replica_id
    if replica >= 0:
        if check.cluster(Operation.CLUSTER_ACTION):
            return await handler(ctx, request)
        return {
            "error_code": 0,
            "session_id": 0,
            "responses": [_fetch_denied(e) for e in body.topics],
        }

    def name_of(entry: Any) -> str | None:
        if _v(request) >= 13:
            topic = ctx.topics.by_id(entry["topic_id"])
            return topic.name if topic is not None else None  # unknown ids: the handler's
        name: str = entry["topic"]
        return name

    return await _split_topics(
        check,
        handler,
        ctx,
        request,
        Operation.READ,
        _fetch_denied,
        name_of=name_of,
        response_field="responses",
    )


async def metadata_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """KafkaApis.handleTopicMetadataRequest: named topics the principal may not DESCRIBE are
    answered TOPIC_AUTHORIZATION_FAILED (by id: with a null name), unknown ones it may not
    CREATE (cluster or topic) are not auto-created (TOPIC_AUTHORIZATION_FAILED); a request for
    every topic lists only the describable ones. Authorized-operation sets when asked for."""
    body = request.body
    version = _v(request)
    named = body.topics
    every = named is None or (version == 0 and len(named) == 0)
    denied: list[dict[str, Any]] = []
    if not every:
        keep = []
        auto_create = body.get("allow_auto_topic_creation", True)
        for entry in named:
            name = entry["name"]
            if name is None:
                topic = ctx.topics.by_id(entry["topic_id"])
                if topic is not None and not check(Operation.DESCRIBE, TOPIC, topic.name):
                    denied.append({"error_code": TOPIC_DENIED, "name": None,
                                   "topic_id": entry["topic_id"], "partitions": []})  # fmt: skip
                    continue
            elif not check(Operation.DESCRIBE, TOPIC, name):
                denied.append({"error_code": TOPIC_DENIED, "name": name, "partitions": []})
                continue
            elif (
                name not in ctx.topics
                and auto_create
                and ctx.config.auto_create_topics_enable
                and not (check.cluster(Operation.CREATE) or check(Operation.CREATE, TOPIC, name))
            ):
                denied.append({"error_code": TOPIC_DENIED, "name": name, "partitions": []})
                continue
            keep.append(entry)
        if denied:
            request = _with(request, topics=keep)
    answer = await handler(ctx, request)
    topics = list(answer.get("topics", ()))
    if every:
        topics = [t for t in topics if check(Operation.DESCRIBE, TOPIC, t["name"])]
    elif denied and not request.body.topics:  # v0: an empty list would have meant every topic
        topics = []
    answer["topics"] = topics + denied
    if body.get("include_topic_authorized_operations"):
        for t in answer["topics"]:
            if t.get("error_code", 0) == 0 and t.get("name"):
                t["topic_authorized_operations"] = check.operations(TOPIC, t["name"])
    if body.get("include_cluster_authorized_operations"):
        answer["cluster_authorized_operations"] = check.operations(CLUSTER, CLUSTER_NAME)
    return answer


async def describe_topic_partitions_rule(
    check: Check, handler: Handler, ctx: Any, request: Request
) -> Any:
    """DescribeTopicPartitionsRequestHandler: a named topic the principal may not DESCRIBE is
    answered TOPIC_AUTHORIZATION_FAILED with a zero topic id (whether it exists is not told);
    a request for every topic lists only the describable ones (dropped from the page, so a page
    may hold fewer partitions than the limit)."""
    named = request.body.topics
    if not named:
        answer = await handler(ctx, request)
        answer["topics"] = [
            t for t in answer.get("topics", ()) if check(Operation.DESCRIBE, TOPIC, t["name"])
        ]
        return answer
    allowed = [e for e in named if check(Operation.DESCRIBE, TOPIC, e["name"])]
    denied = [
        {"error_code": TOPIC_DENIED, "name": e["name"], "is_internal": False, "partitions": []}
        for e in named
        if not check(Operation.DESCRIBE, TOPIC, e["name"])
    ]
    if not allowed:  # an empty list would ask for every topic
        return {"throttle_time_ms": 0, "topics": denied, "next_cursor": None}
    answer = await handler(ctx, _with(request, topics=allowed) if denied else request)
    answer["topics"] = list(answer.get("topics", ())) + denied
    return answer


# OffsetCommit's and OffsetDelete's answer to a refused topic
_REFUSED_TOPIC_PARTITIONS = _refused_partitions("name", "partition_index", error_code=TOPIC_DENIED)


async def offset_commit_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """READ on the group (every partition GROUP_AUTHORIZATION_FAILED), then READ on each
    topic."""

    if not check(Operation.READ, GROUP, request.body.group_id):
        denied = _refused_partitions("name", "partition_index", error_code=GROUP_DENIED)
        return {"topics": [denied(e) for e in request.body.topics]}
    return await _split_topics(
        check, handler, ctx, request, Operation.READ, _REFUSED_TOPIC_PARTITIONS
    )


_REFUSED_OFFSET_FETCH = _refused_partitions(
    "name",
    "partition_index",
    error_code=TOPIC_DENIED,
    committed_offset=-1,
    committed_leader_epoch=-1,
    metadata="",
)


async def offset_fetch_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """DESCRIBE on the group(s), then DESCRIBE on each named topic (TOPIC_AUTHORIZATION_FAILED);
    a request for all of a group's offsets answers only the describable topics."""
    body = request.body
    if _v(request) < 8:
        if not check(Operation.DESCRIBE, GROUP, body.group_id):
            return {"error_code": GROUP_DENIED, "topics": []}
        if body.topics is None:
            answer = await handler(ctx, request)
            answer["topics"] = [
                t for t in answer.get("topics", ()) if check(Operation.DESCRIBE, TOPIC, t["name"])
            ]
            return answer
        return await _split_topics(
            check, handler, ctx, request, Operation.DESCRIBE, _REFUSED_OFFSET_FETCH
        )
    groups, denied_groups, denied_topics = [], [], {}
    for group in body.groups:
        if not check(Operation.DESCRIBE, GROUP, group["group_id"]):
            denied_groups.append(
                {"group_id": group["group_id"], "topics": [], "error_code": GROUP_DENIED}
            )
            continue
        topics = group.get("topics")
        if topics is not None:
            refused = [t for t in topics if not check(Operation.DESCRIBE, TOPIC, t["name"])]
            if refused:
                denied_topics[group["group_id"]] = refused
                group = Body(group, topics=[t for t in topics if t not in refused])
        groups.append(group)
    answer = await handler(ctx, _with(request, groups=groups)) if groups else {"groups": []}
    for group in answer.get("groups", ()):
        hidden = denied_topics.get(group["group_id"])
        if hidden:
            group["topics"] = list(group.get("topics", ())) + [
                _REFUSED_OFFSET_FETCH(t) for t in hidden
            ]
        elif group["group_id"] not in denied_topics:
            asked = next(
                (
                    g
                    for g in groups
                    if g["group_id"] == group["group_id"] and g.get("topics") is None
                ),
                None,
            )
            if asked is not None:  # all of the group's offsets: the describable topics only
                group["topics"] = [
                    t
                    for t in group.get("topics", ())
                    if check(Operation.DESCRIBE, TOPIC, t["name"])
                ]
    answer["groups"] = list(answer.get("groups", ())) + denied_groups
    return answer


async def find_coordinator_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """DESCRIBE on the group (key type 0) or transactional id (1); a refusal carries the error's
    text below v4 and an empty one per key from v4, as Kafka 4.1 answers."""
    body = request.body
    resource = TXN if body.get("key_type", 0) == 1 else GROUP
    code = TXN_DENIED if resource == TXN else GROUP_DENIED
    if _v(request) < 4:
        if not check(Operation.DESCRIBE, resource, body.key):
            return {
                "error_code": code,
                "error_message": _DENIED_MESSAGE[code],
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return await handler(ctx, request)
    keys = list(body.coordinator_keys)
    keep = [k for k in keys if check(Operation.DESCRIBE, resource, k)]
    denied = [
        {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": ""}
        for k in keys
        if k not in keep
    ]
    if not keep:
        return {"coordinators": denied}
    answer = await handler(ctx, _with(request, coordinator_keys=keep) if denied else request)
    answer["coordinators"] = list(answer.get("coordinators", ())) + denied
    return answer


async def describe_groups_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    body = request.body
    keep = [g for g in body.groups if check(Operation.DESCRIBE, GROUP, g)]
    denied = [
        {"error_code": GROUP_DENIED, "group_id": g, "group_state": "", "protocol_type": "",
         "protocol_data": "", "members": [], "authorized_operations": NOT_REQUESTED}
        for g in body.groups
        if g not in keep
    ]  # fmt: skip
    answer = (
        await handler(ctx, _with(request, groups=keep) if denied else request)
        if keep
        else {"groups": []}
    )
    if body.get("include_authorized_operations"):
        for g in answer.get("groups", ()):
            g["authorized_operations"] = check.operations(GROUP, g["group_id"])
    answer["groups"] = list(answer.get("groups", ())) + denied
    return answer


async def describe_cluster_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """Anyone may ask; the cluster's authorized operations, when asked for, are the
    principal's (KafkaApis.handleDescribeCluster), not every operation."""
    answer = await handler(ctx, request)
    if request.body.include_cluster_authorized_operations:
        answer["cluster_authorized_operations"] = check.operations(CLUSTER, CLUSTER_NAME)
    return answer


async def list_groups_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """DESCRIBE on the cluster lists every group, else only the describable ones."""
    answer = await handler(ctx, request)
    if not check.cluster(Operation.DESCRIBE):
        answer["groups"] = [
            g for g in answer.get("groups", ()) if check(Operation.DESCRIBE, GROUP, g["group_id"])
        ]
    return answer


async def delete_groups_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    names = list(request.body.groups_names)
    keep = [g for g in names if check(Operation.DELETE, GROUP, g)]
    denied = [{"group_id": g, "error_code": GROUP_DENIED} for g in names if g not in keep]
    answer = (
        await handler(ctx, _with(request, groups_names=keep) if denied else request)
        if keep
        else {"results": []}
    )
    answer["results"] = list(answer.get("results", ())) + denied
    return answer


async def offset_delete_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    if not check(Operation.DELETE, GROUP, request.body.group_id):
        return {"error_code": GROUP_DENIED, "topics": []}
    return await _split_topics(
        check, handler, ctx, request, Operation.READ, _REFUSED_TOPIC_PARTITIONS
    )


async def create_topics_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """CREATE on the cluster, or on each topic."""
    if check.cluster(Operation.CREATE):
        return await handler(ctx, request)
    return await _split_topics(
        check,
        handler,
        ctx,
        request,
        Operation.CREATE,
        lambda e: {
            "name": e["name"],
            "error_code": TOPIC_DENIED,
            "error_message": "Authorization failed.",
            "topic_config_error_code": 0,  # Kafka 4.1's ControllerApis sets none
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],  # Kafka's CreatableTopicResult default: empty, not null
        },
    )


async def delete_topics_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """DELETE on each topic (by name, or by id from v6); refused topics stay."""
    body = request.body
    if _v(request) < 6:
        names = list(body.topic_names)
        keep = [n for n in names if check(Operation.DELETE, TOPIC, n)]
        denied = [
            {"name": n, "error_code": TOPIC_DENIED, "error_message": _DENIED_MESSAGE[TOPIC_DENIED]}
            for n in names
            if n not in keep
        ]
        if not denied:
            return await handler(ctx, request)
        answer = await handler(ctx, _with(request, topic_names=keep)) if keep else {}
        answer["responses"] = list(answer.get("responses", ())) + denied
        return answer

    def name_of(entry: Any) -> str | None:
        if entry["name"] is not None:
            name: str = entry["name"]
            return name
        topic = ctx.topics.by_id(entry["topic_id"])
        return topic.name if topic is not None else None

    return await _split_topics(
        check,
        handler,
        ctx,
        request,
        Operation.DELETE,
        lambda e: {
            "name": e["name"],
            "topic_id": e["topic_id"],
            "error_code": TOPIC_DENIED,
            "error_message": _DENIED_MESSAGE[TOPIC_DENIED],
        },
        name_of=name_of,
        response_field="responses",
    )


def _config_resource_rule(operation: Operation, response_field: str, extra: dict[str, Any]) -> Rule:
    """DescribeConfigs/AlterConfigs/IncrementalAlterConfigs: topics (type 2) need
    ``operation`` on the topic, brokers (4) and broker loggers (8) on the cluster. A refused
    resource carries the error's text, as Kafka 4.1 answers (ConfigHelper, ControllerApis)."""

    async def rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
        keep, denied = [], []
        for resource in request.body.resources:
            kind, name = resource["resource_type"], resource["resource_name"]
            if kind == TOPIC:
                ok, code = check(operation, TOPIC, name), TOPIC_DENIED
            else:
                ok, code = check.cluster(operation), CLUSTER_DENIED
            if ok:
                keep.append(resource)
            else:
                denied.append(
                    {"error_code": code, "error_message": _DENIED_MESSAGE[code],
                     "resource_type": kind, "resource_name": name, **extra}
                )  # fmt: skip
        if not denied:
            return await handler(ctx, request)
        answer = await handler(ctx, _with(request, resources=keep)) if keep else {}
        answer[response_field] = list(answer.get(response_field, ())) + denied
        return answer

    return rule


async def init_producer_id_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """WRITE on the transactional id when given; else IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic (KIP-679). Checked before the handler, as Kafka's
    handleInitProducerIdRequest checks before the transaction coordinator: a principal without
    WRITE is refused for that, logged as a denial, even though the handler would refuse any
    transactional id anyway (no transactions here, with the same error code)."""
    txn = request.body.transactional_id
    if txn is not None:
        ok, code = check(Operation.WRITE, TXN, txn), TXN_DENIED
    else:
        ok = check.cluster(Operation.IDEMPOTENT_WRITE) or check.any_topic(Operation.WRITE)
        code = CLUSTER_DENIED
    if not ok:
        return {"error_code": code, "producer_id": -1, "producer_epoch": -1}
    return await handler(ctx, request)


async def describe_log_dirs_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    if not check.cluster(Operation.DESCRIBE):
        return {"error_code": CLUSTER_DENIED, "results": []}
    return await handler(ctx, request)


async def elect_leaders_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    if check.cluster(Operation.ALTER):
        return await handler(ctx, request)
    return {
        "error_code": CLUSTER_DENIED,
        "replica_election_results": [
            {
                "topic": t["topic"],
                "partition_result": [
                    {
                        "partition_id": p,
                        "error_code": CLUSTER_DENIED,
                        "error_message": _DENIED_MESSAGE[CLUSTER_DENIED],
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request.body.topic_partitions or ()
        ],
    }


async def offset_for_leader_epoch_rule(
    check: Check, handler: Handler, ctx: Any, request: Request
) -> Any:
    """A follower (CLUSTER_ACTION on the cluster) may ask for every topic; anyone else needs
    DESCRIBE on each topic (KafkaApis.handleOffsetForLeaderEpochRequest)."""
    if check.cluster(Operation.CLUSTER_ACTION):
        return await handler(ctx, request)
    return await _split_topics(
        check,
        handler,
        ctx,
        request,
        Operation.DESCRIBE,
        _refused_partitions(
            "topic", "partition", error_code=TOPIC_DENIED, leader_epoch=-1, end_offset=-1
        ),
        name_of=lambda e: e["topic"],
    )


# -- transactions (KafkaApis 4.1) -------------------------------------------------------------


async def add_partitions_to_txn_rule(
    check: Check, handler: Handler, ctx: Any, request: Request
) -> Any:
    """A client's request (v0-v3) needs WRITE on its transactional id (else every partition
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic: one refused topic fails the
    request, its partitions TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED. A
    broker's batch (v4+) needs CLUSTER_ACTION."""
    body = request.body
    if _v(request) >= 4:
        if not check.cluster(Operation.CLUSTER_ACTION):
            return {"error_code": CLUSTER_DENIED, "results_by_transaction": []}
        return await handler(ctx, request)
    topics = body.v3_and_below_topics

    def answer(code_of: Callable[[str], int]) -> dict[str, Any]:
        return {
            "results_by_topic_v3_and_below": [
                {
                    "name": t["name"],
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code_of(t["name"])}
                        for p in t["partitions"]
                    ],
                }
                for t in topics
            ]
        }

    if not check(Operation.WRITE, TXN, body.v3_and_below_transactional_id):
        return answer(lambda name: TXN_DENIED)
    refused = {t["name"] for t in topics if not check(Operation.WRITE, TOPIC, t["name"])}
    if refused:
        return answer(lambda name: TOPIC_DENIED if name in refused else NOT_ATTEMPTED)
    return await handler(ctx, request)


async def add_offsets_to_txn_rule(
    check: Check, handler: Handler, ctx: Any, request: Request
) -> Any:
    """WRITE on the transactional id, then READ on the group."""
    if not check(Operation.WRITE, TXN, request.body.transactional_id):
        return {"error_code": TXN_DENIED}
    if not check(Operation.READ, GROUP, request.body.group_id):
        return {"error_code": GROUP_DENIED}
    return await handler(ctx, request)


async def txn_offset_commit_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """WRITE on the transactional id, READ on the group (else every partition refused with that
    error), then READ on each topic (TOPIC_AUTHORIZATION_FAILED)."""
    body = request.body
    checks: tuple[tuple[Callable[[], bool], int], ...] = (
        (lambda: check(Operation.WRITE, TXN, body.transactional_id), TXN_DENIED),
        (lambda: check(Operation.READ, GROUP, body.group_id), GROUP_DENIED),
    )
    for ok, code in checks:
        if not ok():
            refused = _refused_partitions("name", "partition_index", error_code=code)
            return {"topics": [refused(t) for t in body.topics]}
    return await _split_topics(
        check, handler, ctx, request, Operation.READ, _REFUSED_TOPIC_PARTITIONS
    )


async def write_txn_markers_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """From a transaction coordinator: ALTER or CLUSTER_ACTION on the cluster."""
    if check.cluster(Operation.ALTER) or check.cluster(Operation.CLUSTER_ACTION):
        return await handler(ctx, request)
    return {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": CLUSTER_DENIED}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in m["topics"]
                ],
            }
            for m in request.body.markers
        ]
    }


async def describe_transactions_rule(
    check: Check, handler: Handler, ctx: Any, request: Request
) -> Any:
    """DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an answer lists
    only the topics the principal may DESCRIBE."""
    ids = list(request.body.transactional_ids)
    keep = [t for t in ids if check(Operation.DESCRIBE, TXN, t)]
    answer = (
        await handler(
            ctx, _with(request, transactional_ids=keep) if len(keep) < len(ids) else request
        )
        if keep
        else {"transaction_states": []}
    )
    states = {s["transactional_id"]: s for s in answer.get("transaction_states", ())}
    for state in states.values():
        state["topics"] = [
            t for t in state.get("topics", ()) if check(Operation.DESCRIBE, TOPIC, t["topic"])
        ]
    answer["transaction_states"] = [
        states.get(t) or {"transactional_id": t, "error_code": TXN_DENIED} for t in ids
    ]
    return answer


async def list_transactions_rule(check: Check, handler: Handler, ctx: Any, request: Request) -> Any:
    """Only the transactional ids the principal may DESCRIBE."""
    answer = await handler(ctx, request)
    answer["transaction_states"] = [
        s
        for s in answer.get("transaction_states", ())
        if check(Operation.DESCRIBE, TXN, s["transactional_id"])
    ]
    return answer


def _denied_cluster_action(request: Request) -> dict[str, Any]:
    return {"error_code": CLUSTER_DENIED}


def _top_error(
    operation: Operation | None = None, **extra: Any
) -> Callable[[Request], dict[str, Any]]:
    """A whole request refused on the cluster: with a text when ``operation`` is given (Kafka's
    ClusterAuthorizationException message), else a null one."""
    message = None if operation is None else _cluster_denied_message(operation)
    return lambda request: {"error_code": CLUSTER_DENIED, "error_message": message, **extra}


def _denied_reassignments(request: Request) -> dict[str, Any]:
    """AlterPartitionReassignments refused on the cluster: the whole request and each of its
    partitions CLUSTER_AUTHORIZATION_FAILED with a text, as Kafka 4.1 answers it."""
    message = _cluster_denied_message(Operation.ALTER)
    return {
        "error_code": CLUSTER_DENIED,
        "error_message": message,
        "responses": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": CLUSTER_DENIED,
                        "error_message": message,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request.body.topics
        ],
    }


A = ApiKey
O = Operation
RULES: dict[ApiKey, Rule] = {
    A.PRODUCE: produce_rule,
    A.FETCH: fetch_rule,
    A.LIST_OFFSETS: _topics_rule(
        O.DESCRIBE,
        _refused_partitions(
            "name",
            "partition_index",
            error_code=TOPIC_DENIED,
            timestamp=-1,
            offset=-1,
            old_style_offsets=(),
        ),
    ),
    A.METADATA: metadata_rule,
    A.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions_rule,
    A.OFFSET_COMMIT: offset_commit_rule,
    A.OFFSET_FETCH: offset_fetch_rule,
    A.FIND_COORDINATOR: find_coordinator_rule,
    A.JOIN_GROUP: group_rule(
        O.READ,
        lambda r: {
            "error_code": GROUP_DENIED,
            "generation_id": -1,
            "protocol_name": None if _v(r) >= 7 else "",
            "leader": "",
            "member_id": r.body.member_id,
            "members": [],
        },
    ),
    A.HEARTBEAT: group_rule(O.READ, lambda r: {"error_code": GROUP_DENIED}),
    A.LEAVE_GROUP: group_rule(O.READ, lambda r: {"error_code": GROUP_DENIED, "members": []}),
    A.SYNC_GROUP: group_rule(O.READ, lambda r: {"error_code": GROUP_DENIED, "assignment": b""}),
    A.DESCRIBE_GROUPS: describe_groups_rule,
    A.LIST_GROUPS: list_groups_rule,
    A.SASL_HANDSHAKE: allowed,
    A.API_VERSIONS: allowed,
    A.CREATE_TOPICS: create_topics_rule,
    A.DELETE_TOPICS: delete_topics_rule,
    A.DELETE_RECORDS: _topics_rule(
        O.DELETE,
        _refused_partitions("name", "partition_index", error_code=TOPIC_DENIED, low_watermark=-1),
    ),
    A.INIT_PRODUCER_ID: init_producer_id_rule,
    A.DESCRIBE_ACLS: cluster_rule(O.DESCRIBE, _top_error(O.DESCRIBE, resources=[])),
    A.CREATE_ACLS: cluster_rule(
        O.ALTER,
        lambda r: {
            "results": [
                {"error_code": CLUSTER_DENIED, "error_message": _cluster_denied_message(O.ALTER)}
                for _ in r.body.creations
            ]
        },
    ),
    A.DELETE_ACLS: cluster_rule(
        O.ALTER,
        lambda r: {
            "filter_results": [
                {
                    "error_code": CLUSTER_DENIED,
                    "error_message": _cluster_denied_message(O.ALTER),
                    "matching_acls": [],
                }
                for _ in r.body.filters
            ]
        },
    ),
    A.DESCRIBE_CONFIGS: _config_resource_rule(O.DESCRIBE_CONFIGS, "results", {"configs": []}),
    A.ALTER_CONFIGS: _config_resource_rule(O.ALTER_CONFIGS, "responses", {}),
    A.INCREMENTAL_ALTER_CONFIGS: _config_resource_rule(O.ALTER_CONFIGS, "responses", {}),
    A.DESCRIBE_LOG_DIRS: describe_log_dirs_rule,
    # The token apis authorize against the token itself (broker/security/token_handlers.py).
    A.CREATE_DELEGATION_TOKEN: allowed,
    A.RENEW_DELEGATION_TOKEN: allowed,
    A.EXPIRE_DELEGATION_TOKEN: allowed,
    A.DESCRIBE_DELEGATION_TOKEN: allowed,
    A.ALTER_REPLICA_LOG_DIRS: cluster_rule(
        O.ALTER,
        lambda r: {
            "results": [
                {
                    "topic_name": t.name,
                    "partitions": [
                        {"partition_index": p, "error_code": CLUSTER_DENIED} for p in t.partitions
                    ],
                }
                for d in r.body.dirs
                for t in d.topics
            ]
        },
    ),
    # Kafka's getErrorResponse texts: the error's own message, no operation named
    A.DESCRIBE_CLIENT_QUOTAS: cluster_rule(
        O.DESCRIBE_CONFIGS,
        lambda r: {
            "error_code": CLUSTER_DENIED,
            "error_message": "Cluster authorization failed.",
            "entries": None,
        },
    ),
    A.ALTER_CLIENT_QUOTAS: cluster_rule(
        O.ALTER_CONFIGS,
        lambda r: {
            "entries": [
                {
                    "error_code": CLUSTER_DENIED,
                    "error_message": "Cluster authorization failed.",
                    "entity": [
                        {"entity_type": e.entity_type, "entity_name": e.entity_name}
                        for e in entry.entity
                    ],
                }
                for entry in r.body.entries
            ]
        },
    ),
    A.SASL_AUTHENTICATE: allowed,
    A.CREATE_PARTITIONS: _topics_rule(
        O.ALTER,
        lambda e: {"name": e["name"], "error_code": TOPIC_DENIED, "error_message": None},
        response_field="results",
    ),
    A.DELETE_GROUPS: delete_groups_rule,
    A.ELECT_LEADERS: elect_leaders_rule,
    A.ALTER_PARTITION_REASSIGNMENTS: cluster_rule(O.ALTER, _denied_reassignments),
    A.LIST_PARTITION_REASSIGNMENTS: cluster_rule(O.DESCRIBE, _top_error(O.DESCRIBE, topics=[])),
    A.UPDATE_FEATURES: cluster_rule(
        O.ALTER,
        lambda r: {
            "error_code": CLUSTER_DENIED,
            "error_message": "Cluster authorization failed.",
            "results": [],
        },
    ),
    A.OFFSET_DELETE: offset_delete_rule,
    # Kafka 4.1 answers one nameless result per user asked for
    A.DESCRIBE_USER_SCRAM_CREDENTIALS: cluster_rule(
        O.DESCRIBE,
        lambda r: {
            "error_code": CLUSTER_DENIED,
            "error_message": None,
            "results": [
                {"user": "", "error_code": CLUSTER_DENIED, "error_message": None}
                for _ in r.body.users or ()
            ],
        },
    ),
    A.ALTER_USER_SCRAM_CREDENTIALS: cluster_rule(
        O.ALTER,
        lambda r: {
            "results": [
                {
                    "user": u,
                    "error_code": CLUSTER_DENIED,
                    "error_message": _cluster_denied_message(O.ALTER),
                }
                for u in dict.fromkeys(
                    [d.name for d in r.body.deletions] + [u.name for u in r.body.upsertions]
                )
            ]
        },
    ),
    A.DESCRIBE_CLUSTER: describe_cluster_rule,
    A.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn_rule,
    A.ADD_OFFSETS_TO_TXN: add_offsets_to_txn_rule,
    A.END_TXN: group_rule(O.WRITE, lambda r: {"error_code": TXN_DENIED}, TXN),
    A.WRITE_TXN_MARKERS: write_txn_markers_rule,
    A.TXN_OFFSET_COMMIT: txn_offset_commit_rule,
    A.DESCRIBE_TRANSACTIONS: describe_transactions_rule,
    A.LIST_TRANSACTIONS: list_transactions_rule,
    # between brokers (broker/cluster/): the controller's requests and followers' epochs need
    # CLUSTER_ACTION, which the brokers' principal must have (super.users, or an ACL)
    A.LEADER_AND_ISR: cluster_rule(O.CLUSTER_ACTION, _denied_cluster_action),
    A.STOP_REPLICA: cluster_rule(O.CLUSTER_ACTION, _denied_cluster_action),
    A.UPDATE_METADATA: cluster_rule(O.CLUSTER_ACTION, _denied_cluster_action),
    A.CONTROLLED_SHUTDOWN: cluster_rule(O.CLUSTER_ACTION, _denied_cluster_action),
    A.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch_rule,
    A.DESCRIBE_PRODUCERS: _topics_rule(
        O.READ,
        _refused_partitions(
            "name",
            "partition_index",
            error_code=TOPIC_DENIED,
            error_message=_DENIED_MESSAGE[TOPIC_DENIED],
            active_producers=(),
        ),
    ),
}


async def call(
    authorizer: Authorizer, session: Session, handler: Handler, ctx: Any, request: Request
) -> Any:
    """Run ``handler`` under the rule of the request's api."""
    api = request.header.api_key
    rule = RULES.get(api)
    if rule is None:  # an api without a rule is refused rather than left open
        logger.error("no authorization rule for this api; refusing it", api=api.name)
        raise PermissionError(f"{api.name} has no authorization rule")
    return await rule(Check(authorizer, session, api), handler, ctx, request)
