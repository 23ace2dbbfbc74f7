"""Logging: one file per actor, and plain module loggers for library code.

Every actor (explorer, trainer, each workflow runner, the synchronizer, ...) writes its
own file under the job's log directory, as ``log.group_by_node`` chooses::

    <job_dir>/log/<actor_name>.log             group_by_node: false
    <job_dir>/log/<node_ip>/<actor_name>.log   group_by_node: true

Each line reads ``[2025-01-31 12:00:00] [INFO] [explorer] message`` (``LINE_PATTERN``
parses it back; ``trinity log`` reads the files with it). Library modules
call ``get_logger(__name__)``; an actor that passes ``capture_library_logs=True`` gets
those records in its own file too (meant for the actor's own process, as on Ray).
"""

from __future__ import annotations

import logging
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
PACKAGE_LOGGER = "trinity"
ACTOR_LOGGER_PREFIX = "trinity.actor."

# Attributes marking the handlers this module attached, so repeated calls replace
# exactly those and leave handlers installed by anyone else alone.
_KEY_ATTR = "_trinity_handler_key"
_CAPTURE_ATTR = "_trinity_capture_for"


def get_logger(name: str) -> logging.Logger:
    """The logger of a library module (``get_logger(__name__)``), under ``trinity``."""
    if name != PACKAGE_LOGGER and not name.startswith(PACKAGE_LOGGER + "."):
        name = f"{PACKAGE_LOGGER}.{name}"
    return logging.getLogger(name)


def metrics_brief(metrics: Mapping[str, float], limit: int = 8) -> str:
    """The first ``limit`` means and losses of ``metrics`` for a log line: ``a/mean=0.5, ...``."""
    keys = [k for k in metrics if k.endswith("/mean") or "loss" in k][:limit]
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in keys)


def parse_level(level: str) -> int:
    """``"info"`` -> ``logging.INFO``; raises ``ValueError`` naming the valid levels."""
    upper = str(level).upper()
    if upper not in LEVELS:
        raise ValueError(f"log.level must be one of {', '.join(LEVELS)}; got '{level}'")
    return getattr(logging, upper)


def node_ip_address() -> str:
    """This node's IP as Ray reports it when Ray is loaded, else from the host name."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            return ray.util.get_node_ip_address()
        except Exception:  # Ray present but not usable here: fall back to the socket
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def actor_log_path(
    actor_name: str, log_dir: Path, group_by_node: bool = False, node_ip: str | None = None
) -> Path:
    """Where ``actor_name`` logs: ``<log_dir>[/<node_ip>]/<actor_name>.log``."""
    if not actor_name or "/" in actor_name or "\\" in actor_name:
        raise ValueError(f"actor name must be a non-empty file name, got '{actor_name}'")
    log_dir = Path(log_dir)
    if group_by_node:
        log_dir = log_dir / (node_ip or node_ip_address())
    return log_dir / f"{actor_name}.log"


def get_actor_logger(
    actor_name: str,
    log_dir: Path | None,
    level: str = "INFO",
    group_by_node: bool = False,
    node_ip: str | None = None,
    *,
    console: bool = False,
    capture_library_logs: bool = False,
) -> logging.Logger:
    """The logger of one actor, writing to its own file (and to stderr if ``console``).

    Idempotent: calling again with the same arguments adds nothing; calling with other
    arguments swaps this function's handlers for the new ones. With neither a file nor
    the console, records propagate to the application's logging configuration.

    Args:
        actor_name: file stem and the tag in each line, e.g. ``explorer_runner_0``.
        log_dir: ``<job_dir>/log``; ``None`` writes no file.
        level: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case).
        group_by_node: put the file in a ``<node_ip>`` subdirectory.
        node_ip: the subdirectory name; detected when not given.
        console: also write the same lines to stderr.
        capture_library_logs: also send records of ``trinity.*`` module loggers to this
            actor's file, and set the ``trinity`` logger to ``level``.
    """
    numeric_level = parse_level(level)
    logger = logging.getLogger(ACTOR_LOGGER_PREFIX + actor_name)
    logger.setLevel(numeric_level)
    formatter = _line_formatter(actor_name)

    wanted: dict[str, logging.Handler] = {}
    if log_dir is not None:
        path = actor_log_path(actor_name, log_dir, group_by_node, node_ip).resolve()
        wanted[f"file:{path}"] = _OwnedFileHandler(path)
    if console:
        wanted["stderr"] = logging.StreamHandler(sys.stderr)

    package_logger = logging.getLogger(PACKAGE_LOGGER)
    for handler in list(logger.handlers):
        key = getattr(handler, _KEY_ATTR, None)
        if key is None:
            continue
        if key in wanted:
            wanted.pop(key).close()  # already attached: keep the existing handler
        else:
            logger.removeHandler(handler)
            package_logger.removeHandler(handler)
            handler.close()
    for key, handler in wanted.items():
        setattr(handler, _KEY_ATTR, key)
        handler.setFormatter(formatter)
        logger.addHandler(handler)

    owned = [h for h in logger.handlers if getattr(h, _KEY_ATTR, None)]
    _set_capture(package_logger, actor_name, owned if capture_library_logs else [], numeric_level)
    # Without handlers of its own the logger defers to the app's configuration.
    logger.propagate = not owned
    return logger


def _set_capture(
    package_logger: logging.Logger, actor_name: str, handlers: list[logging.Handler], level: int
) -> None:
    for handler in list(package_logger.handlers):
        if getattr(handler, _CAPTURE_ATTR, None) == actor_name and handler not in handlers:
            package_logger.removeHandler(handler)
    for handler in handlers:
        if handler not in package_logger.handlers:
            setattr(handler, _CAPTURE_ATTR, actor_name)
            package_logger.addHandler(handler)
    if handlers:
        package_logger.setLevel(level)


def _line_formatter(actor_name: str) -> logging.Formatter:
    tag = actor_name.replace("%", "%%")  # the name is part of a %-style format string
    return logging.Formatter(
        f"[%(asctime)s] [%(levelname)s] [{tag}] %(message)s", datefmt=DATE_FORMAT
    )


# The first line of a record as ``_line_formatter`` writes it; the lines after it
# (a traceback, a multi-line message) belong to the same record. Readers such as
# ``trinity log`` parse files with this pattern.
LINE_PATTERN = re.compile(
    r"^\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\] "
    r"\[(?P<level>[A-Z]+)\] \[(?P<actor>[^\]]*)\] (?P<message>.*)$"
)


class _OwnedFileHandler(logging.FileHandler):
    """A file handler that creates its directory; opened lazily so a discarded one costs nothing."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, encoding="utf-8", delay=True)
