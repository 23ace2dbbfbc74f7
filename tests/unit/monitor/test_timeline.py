"""``monitor.enable_ray_timeline``: the Chrome trace of a real Ray cluster (the suite's head)."""

from __future__ import annotations

import json
import time

import pytest

from trinity.monitor.timeline import TimelineError, timeline_path, write_ray_timeline


def test_without_ray_the_error_says_when_to_call_it(tmp_path):
    import ray

    if ray.is_initialized():
        pytest.skip("Ray is connected in this process")
    with pytest.raises(TimelineError, match="before ray.shutdown"):
        write_ray_timeline(tmp_path)
    assert not timeline_path(tmp_path).exists()


@pytest.mark.slow
def test_timeline_json_holds_the_tasks_that_ran(ray_client, tmp_path):
    ray = ray_client  # this process as a driver of the suite's Ray head

    @ray.remote(num_cpus=0)
    def rollout_probe(x: int) -> int:
        return x + 1

    assert ray.get([rollout_probe.remote(i) for i in range(3)]) == [1, 2, 3]
    # task events reach the GCS about once a second
    deadline = time.monotonic() + 30
    while True:
        path = write_ray_timeline(tmp_path)
        events = json.loads(path.read_text())
        probes = [e for e in events if "rollout_probe" in str(e.get("name", ""))]
        if len(probes) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(1)

    assert path == tmp_path / "monitor" / "timeline.json"
    assert len(probes) >= 3
    # Chrome trace events: a phase, a start time and a duration in microseconds
    assert all({"ph", "ts", "dur"} <= set(e) for e in probes)
