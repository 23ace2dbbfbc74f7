"""trinity's packages import each other without cycles and only down the layering."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "package_graph.py"
_spec = importlib.util.spec_from_file_location("package_graph", _SCRIPT)
graph = importlib.util.module_from_spec(_spec)
sys.modules["package_graph"] = graph  # dataclasses look their module up by name
_spec.loader.exec_module(graph)

# (from package, to package): why that upward import stays. Keep this list short.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    # validate looks a plugin's part names up in the algorithm registries, importing
    # trinity.algorithm (and torch) only when a config names a part that is not built in
    ("config", "algorithm"): "validate: registered algorithm parts, imported on demand",
    # the batch-fill check asks the workflow registry whether a workflow writes one
    # experience per rollout, only for a train batch larger than an explore step writes
    ("config", "workflows"): "train_batch: a registered workflow's experiences per rollout",
    # the dry run decodes a taskset's first images with the readers the run will use
    ("config", "buffer"): "media_rows: a taskset's first rows, read as the run reads them",
    ("config", "rollout"): "media_rows: a taskset's first images, decoded as the run does",
    # type annotations only (under TYPE_CHECKING): no import at run time
    ("types", "rollout"): "Experience's media inputs are annotated with rollout.multimodal",
    ("utils", "config"): "utils.cpu and utils.device annotate their config parameter",
}


@pytest.fixture(scope="module")
def edges():
    return graph.package_edges(graph.load_modules())


def test_no_package_cycles(edges):
    # an allowed upward import closes a cycle by definition; any other cycle fails
    assert graph.cycles({k: v for k, v in edges.items() if k not in ALLOWED_UPWARD}) == []


def test_no_upward_imports(edges):
    upward = {
        (a, b): sorted(f"{i.source}:{i.line}" for i in imps)
        for a, b, imps in graph.upward_edges(edges)
        if (a, b) not in ALLOWED_UPWARD
    }
    assert upward == {}, "declare the package in LAYERS, or move the shared piece down"


def test_allowlist_entries_are_still_needed(edges):
    upward = {(a, b) for a, b, _ in graph.upward_edges(edges)}
    assert set(ALLOWED_UPWARD) <= upward


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "trinity" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "trinity"


def test_finds_a_cycle_hidden_in_a_function_and_an_upward_relative_import(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "types.py": "",
            "config/__init__.py": "",
            "config/schema.py": "def f():\n    from ..cli.main import run\n",
            "cli/__init__.py": "",
            "cli/main.py": "from trinity.config import schema\nfrom . import debug\n",
            "cli/debug.py": "def g():\n    from trinity.cli.main import helper\n",
        },
    )
    modules = graph.load_modules(root)
    edges = graph.package_edges(modules)
    assert graph.cycles(edges) == [["cli", "config"]]
    assert [(a, b) for a, b, _ in graph.upward_edges(edges)] == [("config", "cli")]
    assert graph.module_cycles(modules) == [
        ["trinity.cli.debug", "trinity.cli.main", "trinity.config.schema"]
    ]
    fn_imports = graph.function_level_statements(modules)
    assert fn_imports == {("trinity.config.schema", 2), ("trinity.cli.debug", 2)}


def test_counts_whole_config_receivers(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "launch/__init__.py": "",
            "launch/run.py": (
                "from trinity.config.schema import Config\n"
                "def run(config):\n    pass\n"
                "def steps(cfg: 'Config | None', n: int):\n    pass\n"
                "def other(x: int):\n    pass\n"
                "class Role:\n    def __init__(self, config: Config):\n        pass\n"
            ),
        },
    )
    receivers = graph.config_receivers(graph.load_modules(root))
    assert receivers == {"trinity.launch.run": ["run", "steps", "Role"]}
