"""The ``chronolog`` command (also ``python -m broker``).

    chronolog serve [--config server.properties] [--override key=value ...]
    chronolog dump-log ...   (storage.dump)
    chronolog groups ...     (broker.groups.cli)
    chronolog topics ...     (broker.admin.topics_cli)
    chronolog configs ...    (broker.admin.configs_cli)
    chronolog cluster ...    (broker.cluster.cli)
    chronolog health ...     (broker.health)
    chronolog users ...      (broker.security.users_cli)
    chronolog acls ...       (broker.security.acls_cli)
    chronolog quotas ...     (broker.quotas.cli)

Exit status: 0 after a clean shutdown, 2 for unknown or invalid configuration, 1 when the broker
cannot start (log dir state, port in use) or fails.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import structlog

from broker.config import ConfigError, load_config, not_acted_on
from broker.logging_setup import configure_logging

# subcommand -> module whose main(argv) -> int implements it
DELEGATED = {
    "dump-log": "storage.dump",
    "groups": "broker.groups.cli",
    "topics": "broker.admin.topics_cli",
    "configs": "broker.admin.configs_cli",
    "cluster": "broker.cluster.cli",
    "health": "broker.health",
    "users": "broker.security.users_cli",
    "acls": "broker.security.acls_cli",
    "quotas": "broker.quotas.cli",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronolog", description="Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker until SIGTERM/SIGINT")
    serve.add_argument("--config", metavar="FILE", help="Kafka-style server.properties")
    serve.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a broker property (repeatable; wins over --config)",
    )
    for name, module in DELEGATED.items():
        sub.add_parser(name, help=f"see `chronolog {name} --help` ({module})", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in DELEGATED:
        try:
            module = importlib.import_module(DELEGATED[argv[0]])
        except ImportError as exc:
            print(f"chronolog {argv[0]}: not available: {exc}", file=sys.stderr)
            return 1
        return int(module.main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    return serve(args.config, args.override)


def serve(config_path: str | None, overrides: list[str]) -> int:
    configure_logging()
    logger = structlog.get_logger("broker")
    try:
        config = load_config(config_path, overrides)
    except ConfigError as exc:
        print(f"chronolog: invalid configuration: {exc}", file=sys.stderr)
        logger.error("invalid configuration", key=exc.key, reason=exc.reason)
        return 2
    except OSError as exc:
        print(f"chronolog: cannot read config file: {exc}", file=sys.stderr)
        return 2
    ignored = not_acted_on(config)
    if ignored:
        logger.warning(
            "Kafka properties accepted but not acted on",
            properties=ignored,
            action="chronolog only reports them (DescribeConfigs); listed in docs/operations.md (Administration)",
        )

    import trio

    from broker import collector
    from broker.fast_enums import drop_enum_getattr_hook
    from broker.malloc import keep_freed_buffers
    from broker.server import run

    keep_freed_buffers()
    drop_enum_getattr_hook()
    collector.install()
    from broker.errors import StartupError

    try:
        return trio.run(run, config)
    except StartupError as exc:
        logger.error("cannot start", reason=str(exc))
        return 1
    except OSError as exc:
        logger.error(
            "cannot start",
            error=repr(exc),
            action="check listeners (port in use?) and that log.dirs is writable",
        )
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # includes exception groups from the nurseries
        logger.exception(
            "broker stopped by an unexpected error",
            action="this is a broker bug; report it with this log line",
        )
        return 1
