import logging
import re

import pytest

from trinity.utils.log import get_actor_logger, get_logger

LINE = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] \[(\w+)\] \[([\w.-]+)\] (.*)$")


@pytest.fixture
def actor_name(request):
    """A fresh actor name per test; its handlers are removed afterwards."""
    name = f"test_{request.node.name}".replace("[", "_").replace("]", "")
    yield name
    get_actor_logger(name, None)  # no file, no console: drops this module's handlers


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_flat_layout_and_line_format(tmp_path, actor_name):
    logger = get_actor_logger(actor_name, tmp_path / "log")
    logger.info("step %d started", 3)

    (line,) = lines(tmp_path / "log" / f"{actor_name}.log")
    assert LINE.match(line).groups() == ("INFO", actor_name, "step 3 started")


def test_group_by_node_puts_the_file_under_the_node_ip(tmp_path, actor_name):
    logger = get_actor_logger(actor_name, tmp_path / "log", group_by_node=True, node_ip="10.0.0.7")
    logger.warning("weights synced")

    (line,) = lines(tmp_path / "log" / "10.0.0.7" / f"{actor_name}.log")
    assert LINE.match(line).groups() == ("WARNING", actor_name, "weights synced")
    assert not (tmp_path / "log" / f"{actor_name}.log").exists()


def test_group_by_node_detects_the_ip_when_not_given(tmp_path, actor_name):
    get_actor_logger(actor_name, tmp_path / "log", group_by_node=True).info("hello")

    (path,) = (tmp_path / "log").glob(f"*/{actor_name}.log")
    assert path.parent.name  # e.g. 127.0.1.1
    assert LINE.match(lines(path)[0]).group(3) == "hello"


def test_calling_twice_does_not_duplicate_lines(tmp_path, actor_name):
    first = get_actor_logger(actor_name, tmp_path / "log", console=True)
    second = get_actor_logger(actor_name, tmp_path / "log", console=True)
    assert first is second
    assert len(second.handlers) == 2  # one file, one stderr
    second.info("once")

    assert [LINE.match(x).group(3) for x in lines(tmp_path / "log" / f"{actor_name}.log")] == [
        "once"
    ]


def test_console_copy_goes_to_stderr(tmp_path, actor_name, capsys):
    get_actor_logger(actor_name, tmp_path / "log", console=True).error("workflow failed")

    err = capsys.readouterr().err.strip()
    assert LINE.match(err).groups() == ("ERROR", actor_name, "workflow failed")


def test_level_filters_and_bad_level_is_rejected(tmp_path, actor_name):
    logger = get_actor_logger(actor_name, tmp_path / "log", level="warning")
    logger.info("hidden")
    logger.warning("shown")
    assert [LINE.match(x).group(3) for x in lines(tmp_path / "log" / f"{actor_name}.log")] == [
        "shown"
    ]
    with pytest.raises(ValueError, match="DEBUG, INFO, WARNING"):
        get_actor_logger(actor_name, tmp_path / "log", level="verbose")


def test_a_new_log_dir_replaces_the_old_file(tmp_path, actor_name):
    get_actor_logger(actor_name, tmp_path / "a").info("first")
    get_actor_logger(actor_name, tmp_path / "b").info("second")

    assert LINE.match(lines(tmp_path / "a" / f"{actor_name}.log")[-1]).group(3) == "first"
    assert [LINE.match(x).group(3) for x in lines(tmp_path / "b" / f"{actor_name}.log")] == [
        "second"
    ]


def test_library_logs_are_captured_only_on_request(tmp_path, actor_name):
    library = get_logger("trinity.buffer.example")
    path = tmp_path / "log" / f"{actor_name}.log"

    get_actor_logger(actor_name, tmp_path / "log", capture_library_logs=True)
    library.info("captured")
    get_actor_logger(actor_name, tmp_path / "log", capture_library_logs=False)
    library.warning("not captured")

    assert [LINE.match(x).groups() for x in lines(path)] == [("INFO", actor_name, "captured")]


def test_get_logger_puts_names_under_the_package():
    assert get_logger("trinity.monitor.plots").name == "trinity.monitor.plots"
    assert get_logger("my_plugin").name == "trinity.my_plugin"
    assert isinstance(get_logger("my_plugin"), logging.Logger)
