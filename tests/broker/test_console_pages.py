"""The console's pages as the ASGI app serves them, in the broker's trio loop (broker/console);
tests/integration/test_console.py drives them in a browser."""

from __future__ import annotations

import threading

import trio

from broker import console
from broker.console import build_app
from broker.server import open_context
from tests.broker.test_server import config


async def get(app, path: str) -> tuple[int, bytes]:
    """One GET through the ASGI app: (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"console.test")],
        "client": ("127.0.0.1", 50000),
        "server": ("console.test", 80),
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def rendered_threads(monkeypatch) -> list[str]:
    """The names of the threads the console renders its templates in, from now on."""
    rendered_in: list[str] = []
    real_render = console._render

    def render(*args, **kw):
        rendered_in.append(threading.current_thread().name)
        return real_render(*args, **kw)

    monkeypatch.setattr(console, "_render", render)
    return rendered_in


async def test_the_topics_page_is_rendered_beside_the_loop(tmp_path, monkeypatch):
    """The topics page lists every partition (at 10,000 partitions rendering it took about
    300 ms): its template is rendered off the loop's thread, with every topic and partition."""
    rendered_in = rendered_threads(monkeypatch)
    ctx = await open_context(config(tmp_path))
    for i in range(3):
        await ctx.create_topic(f"shown-{i}", 2)
    status, body = await get(build_app(ctx), "/")
    assert status == 200
    page = body.decode()
    for i in range(3):
        for p in range(2):
            assert f'href="/topics/shown-{i}/{p}"' in page
    assert rendered_in and rendered_in[0] != threading.current_thread().name
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_the_group_pages_read_offsets_in_slices_and_render_beside_the_loop(
    tmp_path, monkeypatch
):
    """The groups page and a group's page list every partition the group committed (it can be
    every partition of the broker): the log ends are read with a turn for other tasks between
    partitions, the templates rendered off the loop's thread, and a partition whose topic is
    gone shows without a lag rather than failing the page."""
    from broker import slices
    from broker.groups import setup as setup_groups
    from broker.groups.offsets import CommittedOffset
    from tests.broker.test_server import other_task_turns

    rendered_in = rendered_threads(monkeypatch)
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 6)
    app = build_app(ctx)
    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup_groups(ctx, nursery)
        for p in range(6):
            ctx.coordinator.offsets.put("g", "t", p, CommittedOffset(0, "", 0))
        ctx.coordinator.offsets.put("g", "gone", 0, CommittedOffset(3, "", 0))
        monkeypatch.setattr(slices, "SLICE_S", 0.0)
        pages = {}
        for path in ("/groups", "/groups/g"):
            async with other_task_turns() as turns_so_far:
                pages[path] = await get(app, path)
                assert turns_so_far() >= 6, path  # a turn between each two of the 7 offsets
        nursery.cancel_scope.cancel()
    assert [status for status, _ in pages.values()] == [200, 200]
    groups_page = pages["/groups"][1].decode()
    assert '<td class="num">7</td><td class="num">0</td>' in groups_page  # committed, lag
    group_page = pages["/groups/g"][1].decode()
    assert all(f'data-topic="t" data-partition="{p}"' in group_page for p in range(6))
    assert 'data-topic="gone" data-partition="0"' in group_page
    loop = threading.current_thread().name
    assert len(rendered_in) == 2 and loop not in rendered_in
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)
