"""DescribeAcls, CreateAcls and DeleteAcls v0-3 (KIP-140) over the broker's AclStore (the ACL
file, or ZooKeeper in a cluster).

Without ``authorizer.class.name`` each answers SECURITY_DISABLED, as Kafka does without an
authorizer. Their own authorization (DESCRIBE / ALTER on the cluster) is :mod:`.rules`'. A
binding Kafka refuses (an UNKNOWN or ANY part, a prefixed cluster, an operation the resource
type does not have, a principal not of the form Type:name) is answered INVALID_REQUEST with the
reason; the valid ones of the same request are created. A store that cannot be written answers
UNKNOWN_SERVER_ERROR with what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from broker.security.acls import (
    AclBinding,
    AclFilter,
    AclStoreError,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.files import StateFileError
from broker.security.session import current_session
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:  # broker.context imports the security package
    from broker.context import BrokerContext
    from broker.handlers import Handler

logger = structlog.get_logger(__name__)

_DISABLED = "No Authorizer is configured on the broker; set authorizer.class.name"


def _gate() -> Any:
    session = current_session.get()
    if session is None or session.gate.authorizer is None:
        return None
    return session.gate


def _enum(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validate()


def _filter(entry: Any) -> AclFilter:
    return AclFilter(
        resource_type=_enum(ResourceType, entry["resource_type_filter"]),
        resource_name=entry["resource_name_filter"],
        pattern_type=_enum(PatternType, entry["pattern_type_filter"]),
        principal=entry["principal_filter"],
        host=entry["host_filter"],
        operation=_enum(Operation, entry["operation"]),
        permission=_enum(Permission, entry["permission_type"]),
    ).validate()


def _wire(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


async def handle_describe_acls(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    gate = _gate()
    if gate is None:
        return {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": _DISABLED}
    try:
        acl_filter = _filter(request.body)
    except InvalidAclError as exc:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(exc)}
    try:
        bindings = gate.acls.bindings()
    except StateFileError as exc:
        return {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": str(exc)}
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for b in sorted(bindings):
        if acl_filter.matches(b):
            resources.setdefault(
                (int(b.resource_type), b.resource_name, int(b.pattern_type)), []
            ).append(
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
            )
    return {
        "error_code": 0,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }


async def handle_create_acls(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    creations = request.body.creations
    gate = _gate()
    if gate is None:
        error = {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": _DISABLED}
        return {"results": [error for _ in creations]}
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in creations:
        try:
            binding = gate.acls.check(
                AclBinding(
                    _enum(ResourceType, c["resource_type"]),
                    c["resource_name"],
                    _enum(PatternType, c["resource_pattern_type"]),
                    c["principal"],
                    c["host"],
                    _enum(Operation, c["operation"]),
                    _enum(Permission, c["permission_type"]),
                )
            )
        except InvalidAclError as exc:
            results.append(
                {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(exc)}
            )
            continue
        valid.append(binding)
        results.append({"error_code": 0, "error_message": None})
    if valid:
        try:
            await gate.acls.create(valid)
        except AclStoreError as exc:
            logger.error("creating ACLs failed", error=str(exc))
            failed = {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": str(exc)}
            return {"results": [r if r["error_code"] else failed for r in results]}
        for binding in valid:
            logger.info("ACL created", acl=binding.describe(), by=_principal())
    return {"results": results}


async def handle_delete_acls(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    entries = request.body.filters
    gate = _gate()
    if gate is None:
        error = {
            "error_code": int(ErrorCode.SECURITY_DISABLED),
            "error_message": _DISABLED,
            "matching_acls": [],
        }
        return {"filter_results": [error for _ in entries]}
    filters: list[AclFilter | None] = []
    problems: list[str | None] = []
    for entry in entries:
        try:
            filters.append(_filter(entry))
            problems.append(None)
        except InvalidAclError as exc:
            filters.append(None)
            problems.append(str(exc))
    usable = [f for f in filters if f is not None]
    try:
        matched = await gate.acls.delete(usable) if usable else []
    except AclStoreError as exc:
        logger.error("deleting ACLs failed", error=str(exc))
        error = {
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": str(exc),
            "matching_acls": [],
        }
        return {"filter_results": [error for _ in entries]}
    results: list[dict[str, Any]] = []
    found = iter(matched)
    for acl_filter, problem in zip(filters, problems):
        if acl_filter is None:
            results.append(
                {
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": problem,
                    "matching_acls": [],
                }
            )
            continue
        removed = next(found)
        for binding in removed:
            logger.info("ACL deleted", acl=binding.describe(), by=_principal())
        results.append(
            {
                "error_code": 0,
                "error_message": None,
                "matching_acls": [
                    {"error_code": 0, "error_message": None, **_wire(b)} for b in removed
                ],
            }
        )
    return {"filter_results": results}


def _principal() -> str | None:
    session = current_session.get()
    return session.principal if session is not None else None


ACL_HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
