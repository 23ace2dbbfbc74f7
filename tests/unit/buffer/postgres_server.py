"""A throwaway PostgreSQL server for the buffer tests, from the `pgserver` wheel's binaries.

The `test` extra installs `pgserver`, a wheel that carries PostgreSQL's own binaries
(initdb, pg_ctl, postgres); nothing needs root or a system package. Its Python wrapper
is not used: as root it adds a system user and widens the permissions of the folders
above the venv, where this module runs the server as `nobody` in a temp dir instead.

The server listens on a unix socket in its data directory only (no TCP port), trusts
local connections, and is stopped and deleted when the last user releases it.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# postgres refuses to run as root; a root test run starts it as this user
UNPRIVILEGED_USER = "nobody"
# a unix socket path is limited to 107 bytes; mkdtemp under a long $TMPDIR may exceed it
MAX_SOCKET_DIR = 80


def pgserver_bin() -> Path | None:
    """The directory of the pgserver wheel's PostgreSQL binaries, or None without the wheel."""
    spec = importlib.util.find_spec("pgserver")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


class LocalPostgres:
    """One server in a temp dir; ``url`` is its ``postgres`` database as a SQLAlchemy URL."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        parent = None if len(tempfile.gettempdir()) < MAX_SOCKET_DIR else "/tmp"
        self.root = Path(tempfile.mkdtemp(prefix="trinity-pg-", dir=parent))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.user = UNPRIVILEGED_USER if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        try:
            self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                      "--encoding=UTF8", "--no-locale")  # fmt: skip
            self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                      "-o", f"-c listen_addresses='' -k {self.root}", "start")  # fmt: skip
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql+psycopg://postgres@/postgres?host={self.root}"

    def _run(self, program: str, *args: str | Path) -> None:
        result = subprocess.run(
            [str(self.bin_dir / program), *map(str, args)],
            user=self.user,
            cwd=self.root,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            hint = (
                f"\n(as root the server runs as {self.user}, who must be able to read "
                f"{self.bin_dir.parent}; or set TRINITY_TEST_POSTGRES_URL)"
                if self.user
                else ""
            )
            raise RuntimeError(
                f"{program} failed ({result.returncode}):\n{result.stdout}{result.stderr}{log}{hint}"
            )

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


_server: LocalPostgres | None = None
_users = 0


def acquire() -> str:
    """The server's URL, starting it on the first call of this process."""
    global _server, _users
    if _server is None:
        bin_dir = pgserver_bin()
        if bin_dir is None:
            pytest.skip(
                "no PostgreSQL server: install the test extra (pip install -e '.[test]', "
                "which brings pgserver) or set TRINITY_TEST_POSTGRES_URL"
            )
        _server = LocalPostgres(bin_dir)
    _users += 1
    return _server.url


def release() -> None:
    """Stop the server once every :func:`acquire` has been released."""
    global _server, _users
    _users -= 1
    if _users == 0 and _server is not None:
        _server.stop()
        _server = None
