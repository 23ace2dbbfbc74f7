"""sqlalchemy is imported only where SQL storage is used.

Each run process (explorer, trainer, buffer actor) imports the buffer package; a run with
a queue buffer and a file taskset must not pay for loading sqlalchemy. The check runs in
a fresh interpreter, since this test session has imported sqlalchemy long ago: first
everything a run without SQL builds, then a queue backed up to a database (which loads
sqlalchemy), then the SQL storages by their lazy names.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RUN = """
import sys

import trinity.buffer
import trinity.buffer.experience_buffer
import trinity.buffer.priority_queue
import trinity.buffer.queue
import trinity.buffer.task_reader
import trinity.launch.buffer_actor
import trinity.trainer.sft_data
from trinity.buffer import make_experience_buffer
from trinity.config.schema import ExperienceBufferConfig
from trinity.launch.buffer_actor import BufferActor

queue = make_experience_buffer(ExperienceBufferConfig(name="exp", storage_type="queue"))
queue.close()
priority = make_experience_buffer(
    ExperienceBufferConfig(name="exp", storage_type="queue", use_priority_queue=True)
)
priority.close()
BufferActor(ExperienceBufferConfig(name="exp", storage_type="queue")).close()
loaded = sorted(m for m in sys.modules if m == "sqlalchemy" or m.startswith("sqlalchemy."))
assert not loaded, f"sqlalchemy loaded without SQL storage: {{loaded[:5]}}"

# a queue whose backup is a database
backed_up = make_experience_buffer(ExperienceBufferConfig(name="exp", storage_type="queue", path={backup!r}))
assert "sqlalchemy" in sys.modules
backed_up.close()

from trinity.buffer import SQLExperienceStorage, SQLTaskStorage, database_url

assert database_url({db!r}).startswith("sqlite:///")
storage = SQLExperienceStorage({db!r})
assert storage.count() == 0
storage.close()
SQLTaskStorage({tasks!r}).close()
buffer = make_experience_buffer(ExperienceBufferConfig(name="exp", storage_type="sql", path={db!r}))
buffer.close()
print("ok")
"""


def test_sqlalchemy_loads_only_with_sql_storage(tmp_path: Path) -> None:
    code = RUN.format(
        backup=str(tmp_path / "backup.db"),
        db=str(tmp_path / "buffer.db"),
        tasks=str(tmp_path / "tasks.db"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-2000:]
    assert (tmp_path / "backup.db").is_file()
    assert (tmp_path / "buffer.db").is_file()
