"""docs/modules.md and the README's counts are generated and must match the code; docs/architecture.md names what exists."""

import re

from trinity.project_docs import (
    MODULES_DOC,
    README,
    REGENERATE,
    missing_docstrings,
    render_modules,
    with_counts,
)


def test_every_module_has_a_docstring() -> None:
    assert missing_docstrings() == [], "give each module a one-line docstring first"


def test_module_index_is_up_to_date() -> None:
    assert MODULES_DOC.read_text(encoding="utf-8") == render_modules(), f"regenerate: {REGENERATE}"


def test_readme_counts_are_up_to_date() -> None:
    readme = README.read_text(encoding="utf-8")
    assert readme == with_counts(readme), f"regenerate: {REGENERATE}"


def test_a_plugin_registered_in_this_process_is_not_counted(monkeypatch) -> None:
    # a plugin test on the same worker registers a reward function of its own
    from trinity.rewards.registry import REWARD_FNS

    before = with_counts(README.read_text(encoding="utf-8"))

    def plugin_reward(response: str, truth: str) -> dict[str, float]:
        return {}

    plugin_reward.__module__ = "my_plugins.rewards"
    monkeypatch.setitem(REWARD_FNS._items, "plugin_reward", plugin_reward)
    assert "plugin_reward" in REWARD_FNS
    assert with_counts(README.read_text(encoding="utf-8")) == before


def test_the_counts_name_every_mode_and_a_registered_workflow() -> None:
    block = with_counts(README.read_text(encoding="utf-8"))
    for name in ("`serve`", "`bench`", "`grpo`", "`math_workflow`", "`math_reward`"):
        assert name in block, name


def test_architecture_names_every_package_and_only_modules_that_exist() -> None:
    text = (MODULES_DOC.parent / "architecture.md").read_text(encoding="utf-8")
    package_dir = MODULES_DOC.parents[1] / "trinity"
    packages = sorted(p.parent.name for p in package_dir.glob("*/__init__.py"))
    listed = set(re.findall(r"^- `(\w+)/`", text, re.MULTILINE))
    assert listed == set(packages), "docs/architecture.md ## Packages: one line per package"
    named = set(re.findall(r"`((?:\w+/)+\w+\.py)", text))
    missing = sorted(path for path in named if not (package_dir / path).is_file())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
