"""The web console and ``/metrics``: a Starlette app served on ``metrics.listener`` by
broker/http.py, in the broker's event loop.

Server-rendered pages (Jinja2, autoescaped: keys and values are arbitrary bytes), a CSS file and a
little vanilla JS from ``static/`` (nothing from a CDN, no build step). Handlers run on the trio
thread and read the broker's state as the Kafka handlers do; partition data through
broker/console/data.py under the partition lock. The topics page, which lists every partition,
reads them in slices and is rendered in a worker thread. Read-only unless ``console.read.only=false``:
the destructive actions (delete a topic, reset a group's offsets) are POST forms that need a
typed confirmation and are refused with 403 while read-only or when posted from another origin.
"""

from __future__ import annotations

import functools
import os
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jinja2
import structlog
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from broker import workers
from broker.config import TOPIC_KEYS
from broker.console import data
from broker.context import BrokerContext
from broker.groups.cli import decode_assignment
from broker.groups.lag import committed_and_ends
from broker.groups.state import GroupSummary
from broker.slices import Slices

logger = structlog.get_logger(__name__)

HERE = os.path.dirname(__file__)
templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")), autoescape=True
    )
)
templates.env.filters["ms"] = data.format_ms
templates.env.filters["bytes"] = lambda n: _human_bytes(n)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ctx(request: Request) -> BrokerContext:
    ctx: BrokerContext = request.app.state.ctx
    return ctx


def _render(request: Request, name: str, status: int = 200, **values: Any) -> Response:
    ctx = _ctx(request)
    return templates.TemplateResponse(
        request,
        name,
        {"read_only": ctx.config.console_read_only, "cluster_id": ctx.cluster_id, **values},
        status_code=status,
    )


async def _render_beside(request: Request, name: str, **values: Any) -> Response:
    """:func:`_render` in a worker thread, for a page that lists every partition: at 10,000
    partitions rendering the topics page took about 300 ms. ``values`` are plain data, read
    on the loop beforehand, which nothing changes meanwhile."""
    return await workers.run_sync(functools.partial(_render, request, name, **values))


def _int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer, got {raw[:50]!r}") from None


# -- pages ---------------------------------------------------------------------------------------


async def metrics(request: Request) -> Response:
    ctx = _ctx(request)
    assert ctx.metrics is not None
    return Response(await ctx.metrics.scrape(), media_type=CONTENT_TYPE_LATEST)


async def topics_page(request: Request) -> Response:
    ctx = _ctx(request)
    messages_in = ctx.metrics.messages_in if ctx.metrics is not None else {}
    rows = []
    slices = Slices()  # a topic is never split
    for name in sorted(ctx.topics.names()):
        await slices.turn()
        topic = ctx.topics.get(name)
        if topic is None:
            continue
        partitions = []
        for p in range(topic.partitions):
            log = ctx.get_log(name, p)
            if log is None:
                partitions.append({"partition": p, "offline": True})
                continue
            partitions.append(
                {
                    "partition": p,
                    "offline": False,
                    "start": log.log_start_offset,
                    "end": log.log_end_offset,
                    "messages": log.log_end_offset - log.log_start_offset,
                    "size": sum(s.size for s in log.segments),
                    "segments": len(log.segments),
                }
            )
        effective = {key: getattr(topic.config, k.attribute) for key, k in TOPIC_KEYS.items()}
        rows.append(
            {
                "name": name,
                "partitions": partitions,
                "size": sum(p.get("size", 0) for p in partitions),
                "messages": sum(p.get("messages", 0) for p in partitions),
                "produced": messages_in.get(name, 0),
                "overrides": {k: _mask(k, v) for k, v in sorted(topic.overrides.items())},
                "effective": {k: _mask(k, str(v)) for k, v in effective.items()},
            }
        )
    return await _render_beside(
        request, "topics.html", topics=rows, uptime_counted=ctx.metrics is not None
    )


def _mask(name: str, value: str) -> str:
    return data.HIDDEN if data.is_secret(name) and value else value


async def partition_page(request: Request) -> Response:
    ctx = _ctx(request)
    topic, partition = request.path_params["topic"], request.path_params["partition"]
    segments = await data.segments(ctx, topic, partition)
    txns = await data.partition_txns(ctx, topic, partition)
    if segments is None or txns is None:
        raise HTTPException(404, f"no partition {topic}-{partition}")
    stamps = [t for s in segments for t in (s.first_timestamp, s.largest_timestamp) if t >= 0]
    lo, hi = (min(stamps), max(stamps)) if stamps else (0, 1)
    width, row = 760, 26
    bars = []
    for i, s in enumerate(segments):
        first = s.first_timestamp if s.first_timestamp >= 0 else s.largest_timestamp
        last = s.largest_timestamp
        if first < 0:
            x, w = 0.0, 2.0
        else:
            span = max(hi - lo, 1)
            x = (first - lo) / span * width
            w = max((max(last, first) - first) / span * width, 3.0)
        bars.append({"seg": s, "x": round(x, 1), "y": i * row, "w": round(w, 1)})
    return _render(
        request,
        "partition.html",
        topic=topic,
        partition=partition,
        segments=segments,
        txns=txns,
        bars=bars,
        svg_width=width,
        svg_height=max(len(segments), 1) * row + 24,
        row=row,
        lo=lo,
        hi=hi,
    )


def _parse_time(request: Request) -> int | None:
    """The time to look up, ms since the epoch: the ``ms`` field, else the datetime-local
    field ``at`` read as UTC."""
    ms = _int(request, "ms")
    if ms is not None:
        if ms < 0:
            raise HTTPException(400, "ms must be a time since the epoch (>= 0)")
        return ms
    at = request.query_params.get("at", "").strip()
    if not at:
        return None
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        raise HTTPException(400, f"at must be a date and time, got {at[:50]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


async def messages_page(request: Request) -> Response:
    ctx = _ctx(request)
    topic, partition = request.path_params["topic"], request.path_params["partition"]
    offset = _int(request, "offset")
    timestamp = None if offset is not None else _parse_time(request)
    if offset is None and timestamp is None:
        offset = 0  # below the log start: from the log start
    if offset is not None and offset < 0:
        raise HTTPException(400, "offset must be >= 0")
    found = await data.page(ctx, topic, partition, offset=offset, timestamp=timestamp)
    if found is None:
        raise HTTPException(404, f"no partition {topic}-{partition}")
    return _render(
        request,
        "messages.html",
        topic=topic,
        partition=partition,
        found=found,
        looked_up=timestamp,
        offset=offset,
    )


async def groups_page(request: Request) -> Response:
    ctx = _ctx(request)
    coordinator = ctx.coordinator
    names: set[str] = set()
    states: dict[str, str] = {}
    if coordinator is not None:
        names.update(coordinator.offsets.groups())
        _, overview = coordinator.list_groups()
        names.update(g for g, _ in overview)
        for name in names:
            _, summary = coordinator.describe(name)
            states[name] = summary.state if summary is not None else "?"
    rows = []
    for name in sorted(names):
        lag = await _lag(ctx, name)
        rows.append(
            {
                "name": name,
                "state": states.get(name, "?"),
                "committed": len(lag),
                "total_lag": sum(r["lag"] or 0 for r in lag),
            }
        )
    return await _render_beside(request, "groups.html", groups=rows, active=coordinator is not None)


async def _lag(ctx: BrokerContext, group: str) -> list[dict[str, Any]]:
    """Per committed (topic, partition) of ``group``, unsorted: committed offset, log end and
    lag (None for a partition the broker does not have), read in slices."""
    coordinator = ctx.coordinator
    if coordinator is None:
        return []
    return [
        {
            "topic": row.topic,
            "partition": row.partition,
            "committed": row.committed,
            "end": row.log_end,
            "lag": row.lag,
        }
        for row in await committed_and_ends(coordinator.offsets, group, ctx.get_log)
    ]


async def group_page(request: Request) -> Response:
    ctx = _ctx(request)
    group = request.path_params["group"]
    coordinator = ctx.coordinator
    if coordinator is None:
        raise HTTPException(503, "the group coordinator is not running yet; reload in a moment")
    _, summary = coordinator.describe(group)
    lag = await _lag(ctx, group)
    if (summary is None or summary.state == "Dead") and not lag:
        raise HTTPException(404, f"no group {group!r}")
    return await workers.run_sync(_group_page_beside, request, group, summary, lag)


def _group_page_beside(
    request: Request, group: str, summary: GroupSummary | None, lag: list[dict[str, Any]]
) -> Response:
    """Worker thread: the group page from what :func:`group_page` read on the loop (the
    summary is the coordinator's snapshot, ``lag`` this call's own rows)."""
    members = []
    for m in summary.members if summary is not None else ():
        try:
            assigned = [f"{t}-{p}" for t, p in decode_assignment(m.assignment)]
        except ValueError:
            assigned = []
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": assigned,
            }
        )
    lag.sort(key=lambda r: (r["topic"], r["partition"]))
    biggest = max((r["lag"] or 0 for r in lag), default=0)
    bar_width = 520
    for r in lag:
        r["bar"] = round((r["lag"] or 0) / biggest * bar_width, 1) if biggest else 0
    return _render(
        request,
        "group.html",
        group=group,
        state=summary.state if summary is not None else "?",
        members=members,
        lag=lag,
        total_lag=sum(r["lag"] or 0 for r in lag),
        bar_width=bar_width,
        topics=sorted({r["topic"] for r in lag}),
    )


async def transactions_page(request: Request) -> Response:
    return _render(request, "transactions.html", overview=data.transactions(_ctx(request)))


async def broker_page(request: Request) -> Response:
    ctx = _ctx(request)
    return _render(
        request,
        "broker.html",
        configs=data.broker_configs(ctx),
        log_dirs=data.log_dirs(ctx),
        broker_id=ctx.config.broker_id,
    )


# -- destructive actions -------------------------------------------------------------------------


async def _form(request: Request) -> dict[str, str]:
    """The POSTed form, after the checks every action needs: 403 while read-only or when the
    browser says it comes from another origin."""
    ctx = _ctx(request)
    if ctx.config.console_read_only:
        raise HTTPException(
            403, "the console is read-only; set console.read.only=false to allow this"
        )
    origin = request.headers.get("origin")
    if origin and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, "form posted from another site; use the console's own page")
    body = await request.body()
    if len(body) > 65536:
        raise HTTPException(413, "form too large")
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in parsed.items()}


async def delete_topic(request: Request) -> Response:
    ctx = _ctx(request)
    form = await _form(request)
    topic = request.path_params["topic"]
    if form.get("confirm") != topic:
        raise HTTPException(400, "type the topic's name into the confirmation field to delete it")
    if topic.startswith("__"):
        raise HTTPException(403, f"{topic} is an internal topic; the broker needs it")
    if not await ctx.delete_topic(topic):
        raise HTTPException(404, f"no topic {topic!r}")
    logger.warning("topic deleted from the console", topic=topic, peer=_peer(request))
    return RedirectResponse("/", status_code=303)


async def reset_group(request: Request) -> Response:
    ctx = _ctx(request)
    form = await _form(request)
    group = request.path_params["group"]
    coordinator = ctx.coordinator
    if coordinator is None:
        raise HTTPException(503, "the group coordinator is not running yet; try again")
    if form.get("confirm") != group:
        raise HTTPException(400, "type the group's name into the confirmation field to reset it")
    topic_name = form.get("topic", "")
    topic = ctx.topics.get(topic_name)
    if topic is None:
        raise HTTPException(404, f"no topic {topic_name!r}")
    value = form.get("value", "").strip()
    try:
        number = int(value) if form.get("to") == "offset" else _ms_of(value)
    except ValueError:
        raise HTTPException(400, f"not an offset or a date and time: {value[:50]!r}") from None
    if form.get("to") == "offset":
        targets = {p: number for p in range(topic.partitions)}
    else:
        targets = await data.offsets_for_time(ctx, topic_name, topic.partitions, number)
    entries = [(topic_name, p, offset, "", -1) for p, offset in sorted(targets.items())]
    errors = await coordinator.commit_offsets(group, "", -1, None, entries)
    failed = {p: e.name for (_, p, *_), e in zip(entries, errors) if e.value != 0}
    if failed:
        raise HTTPException(
            409,
            f"not reset: {failed}; a group with active members cannot be reset, stop its "
            "consumers first",
        )
    logger.warning(
        "group offsets reset from the console",
        group=group,
        topic=topic_name,
        offsets=targets,
        peer=_peer(request),
    )
    return RedirectResponse(f"/groups/{group}", status_code=303)


def _ms_of(value: str) -> int:
    if value.isdigit():
        return int(value)
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _peer(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "?"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code >= 500:
        logger.warning("console request failed", path=request.url.path, reason=exc.detail)
    if "text/html" in request.headers.get("accept", ""):
        return _render(
            request,
            "error.html",
            status=exc.status_code,
            status_code=exc.status_code,
            detail=exc.detail,
        )
    return PlainTextResponse(f"{exc.detail}\n", status_code=exc.status_code)


def build_app(ctx: BrokerContext) -> Starlette:
    """The ASGI app for ``metrics.listener``: ``/metrics`` and the console."""
    app = Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/", topics_page),
            Route("/topics/{topic}/{partition:int}", partition_page),
            Route("/topics/{topic}/{partition:int}/messages", messages_page),
            Route("/topics/{topic}/delete", delete_topic, methods=["POST"]),
            Route("/groups", groups_page),
            Route("/groups/{group}", group_page),
            Route("/groups/{group}/reset", reset_group, methods=["POST"]),
            Route("/transactions", transactions_page),
            Route("/broker", broker_page),
            Mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static"),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.ctx = ctx
    return app


__all__ = ["build_app"]
