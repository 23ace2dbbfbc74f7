"""Trinity Studio in a real browser: Debian's chromium driven by Playwright.

The Studio runs as a real server on a free local port; the test fills the beginner
form, generates the YAML, runs ``trinity run --dry-run`` on it, then enters an invalid
combination and looks for the warning. Screenshots go to ``test-artifacts/studio/``.

Needs ``/usr/bin/chromium`` (``bash scripts/ci_browser.sh``, as root, installs it) and
the Python packages ``playwright`` and ``streamlit`` (the ``test`` extra); Playwright's
own browser download is never used. Skipped, with the command that installs what is
missing, when any of them is absent.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from studio_testing import REPO, studio_server

from trinity.config import OptimizerConfig
from trinity.config.setting import help_of

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "studio"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000  # one Streamlit rerun validates the config; slow on a busy 2-core CI box


def _missing() -> str | None:
    """Why the browser tests cannot run here, with the command that fixes it; None if they can."""
    if not CHROMIUM.exists():
        return f"Debian's chromium is not installed at {CHROMIUM}; run as root: bash scripts/ci_browser.sh"
    for package in ("playwright", "streamlit"):
        if importlib.util.find_spec(package) is None:
            return f"the {package} package is not installed; run: pip install -e '.[test]'"
    return None


MISSING = _missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


@pytest.fixture(scope="module")
def studio_url(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("studio") / "studio.log"
    with studio_server(log) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def page(studio_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        # tall enough that a screenshot shows the whole form and the generated YAML
        page = browser.new_page(viewport={"width": 1400, "height": 2600}, accept_downloads=True)
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(studio_url)
        page.get_by_text("Essential Configs").wait_for()
        _settle(page)
        yield page
        browser.close()


def _settle(page) -> None:
    """Wait until Streamlit has finished the rerun the last input started."""
    page.wait_for_timeout(300)  # the rerun request leaves the page asynchronously
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def _text(page, key: str, value: str) -> None:
    box = page.get_by_label(key, exact=True)
    box.fill(value)
    box.press("Enter")
    _settle(page)


def _number(page, key: str, value: int) -> None:
    _text(page, key, str(value))


def _choose(page, key: str, option: str) -> None:
    page.get_by_role("combobox", name=key, exact=True).click()
    # the list renders only the options in view; typing filters it down to the one wanted
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()
    _settle(page)


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_beginner_form_generates_a_config_trinity_run_accepts(page, tmp_path):
    from playwright.sync_api import expect

    taskset = REPO / "examples" / "arithmetic" / "data"
    _text(page, "name", "studio-e2e")
    _text(page, "checkpoint_root_dir", str(tmp_path / "checkpoints"))
    _text(page, "model.model_path", "SmolLM2-135M-Instruct")
    _text(page, "buffer.explorer_input.taskset.name", "arithmetic")
    _choose(page, "buffer.explorer_input.taskset.storage_type", "file")
    _text(page, "buffer.explorer_input.taskset.path", str(taskset))
    _text(page, "buffer.explorer_input.taskset.format.prompt_key", "question")
    _text(page, "buffer.explorer_input.taskset.format.response_key", "answer")
    _choose(page, "buffer.explorer_input.default_workflow_type", "math_workflow")
    _choose(page, "buffer.explorer_input.default_reward_fn_type", "math_reward")
    _choose(page, "algorithm.algorithm_type", "grpo")
    _number(page, "algorithm.repeat_times", 4)
    _number(page, "buffer.batch_size", 2)
    _number(page, "model.max_prompt_tokens", 64)
    _number(page, "model.max_response_tokens", 32)
    _shot(page, "1_beginner_filled.png")

    page.get_by_role("button", name="Generate Config").click()
    code = page.locator('[data-testid="stCode"] code')
    expect(code).to_be_visible()
    _shot(page, "2_generated.png")
    yaml_text = code.inner_text()
    assert "algorithm_type: grpo" in yaml_text
    assert "repeat_times: 4" in yaml_text
    with page.expect_download() as download:
        page.get_by_role("button", name="Download config").click()
    downloaded = Path(download.value.path()).read_text()
    assert downloaded.strip() == yaml_text.strip()
    assert download.value.suggested_filename == "studio-e2e.yaml"

    config = tmp_path / "studio.yaml"
    config.write_text(yaml_text)
    result = subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(config), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # 2 tasks x 4 rollouts: the batch arithmetic of the form's values
    assert "buffer.train_batch_size): 8" in result.stdout

    # grpo compares rollouts within a group: one rollout per task cannot work
    _number(page, "algorithm.repeat_times", 1)
    field_warning = page.locator('[data-testid="stAlert"]').filter(
        has_text="algorithm.repeat_times: grpo needs repeat_times > 1"
    )
    expect(field_warning.first).to_be_visible()
    expect(page.get_by_text("The config is not valid yet")).to_be_visible()
    expect(code).to_have_count(0)
    _shot(page, "3_invalid_warning.png")


def test_expert_mode_shows_every_section_and_keeps_beginner_values(page):
    from playwright.sync_api import expect

    _text(page, "model.model_path", "my/model")
    page.get_by_text("Expert Mode", exact=True).click()
    _settle(page)
    for tab in ("Model", "Buffer", "Explorer and Synchronizer", "Trainer"):
        expect(page.get_by_role("tab", name=tab, exact=True)).to_be_visible()
    expect(page.get_by_label("model.model_path", exact=True)).to_have_value("my/model")
    page.get_by_role("tab", name="Trainer", exact=True).click()
    page.get_by_text("algorithm.optimizer", exact=True).click()  # a collapsed sub-section
    expect(page.get_by_label("algorithm.optimizer.lr", exact=True)).to_be_visible()
    # the schema's help string of the key shows behind its ? icon
    page.get_by_role("button", name="Help for algorithm.optimizer.lr", exact=True).hover()
    expect(page.get_by_text(help_of(OptimizerConfig, "lr"), exact=True)).to_be_visible()
    _shot(page, "4_expert_trainer.png")
