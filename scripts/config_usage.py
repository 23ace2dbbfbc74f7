"""How the code uses its config: lines per config module, veRL-path readers, whole-Config receivers.

    python scripts/config_usage.py            # the three figures, then the lists
    python scripts/config_usage.py --summary  # the figures only

- lines per module of ``trinity/config`` (``wc -l``);
- modules outside ``trinity/config`` that read a veRL-layout path: an attribute read of
  ``trainer_config`` or of a name only the veRL layout has (``actor_rollout_ref``, ...);
- functions that receive the whole ``Config``: a parameter annotated ``Config``, or an
  unannotated (or ``Any``) parameter named ``config``/``cfg`` whose body reads one of the root
  sections of ``Config`` from it (``cfg.buffer``, ``config.trainer``, ...).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trinity"
CONFIG_DIR = PACKAGE / "config"

# attribute names that exist only in the veRL layout of trainer.trainer_config
VERL_ATTRS = frozenset({"trainer_config", "actor_rollout_ref"})
CONFIG_PARAM_NAMES = frozenset({"config", "cfg"})
LOOSE_TYPES = frozenset({"Any", "object", "typing.Any"})


def root_sections() -> frozenset[str]:
    """Field names of the root ``Config`` (the sections a whole-Config receiver reads)."""
    sys.path.insert(0, str(ROOT))
    from trinity.config.schema import Config

    return frozenset(f.name for f in dataclasses.fields(Config))


def config_lines() -> list[tuple[str, int]]:
    """``(path, lines)`` of every module under trinity/config, largest first."""
    rows = [
        (str(p.relative_to(ROOT)), len(p.read_text().splitlines()))
        for p in sorted(CONFIG_DIR.rglob("*.py"))
    ]
    return sorted(rows, key=lambda row: -row[1])


def outside_modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if CONFIG_DIR not in p.parents]


def verl_readers() -> dict[str, list[int]]:
    """Lines of each module outside trinity/config that read a veRL-layout attribute."""
    found: dict[str, list[int]] = {}
    for path in outside_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in VERL_ATTRS:
                found.setdefault(str(path.relative_to(ROOT)), []).append(node.lineno)
    return found


def _annotation_is_config(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).strip("'\"")
    return text in ("Config", "Config | None") or text.endswith(".Config")


def _reads_section(function: ast.AST, name: str, sections: frozenset[str]) -> bool:
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in sections
            and isinstance(node.value, ast.Name)
            and node.value.id == name
        ):
            return True
    return False


def config_receivers(paths: list[Path], sections: frozenset[str]) -> list[str]:
    """``module:function`` of each function that receives the whole ``Config``."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                typed = _annotation_is_config(arg.annotation)
                loose = arg.annotation is None or ast.unparse(arg.annotation) in LOOSE_TYPES
                used = (
                    loose
                    and arg.arg in CONFIG_PARAM_NAMES
                    and _reads_section(node, arg.arg, sections)
                )
                if typed or used:
                    found.append(f"{path.relative_to(ROOT)}:{node.name}")
                    break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print the figures only")
    summary = parser.parse_args().summary
    sections = root_sections()
    lines = config_lines()
    readers = verl_readers()
    outside = config_receivers(outside_modules(), sections)
    inside = config_receivers(sorted(CONFIG_DIR.rglob("*.py")), sections)
    outside_mods = sorted({r.split(":")[0] for r in outside})
    print(f"trinity/config: {len(lines)} modules, {sum(n for _, n in lines)} lines")
    print(f"modules outside trinity/config reading a veRL path: {len(readers)}")
    print(
        f"whole-Config receivers: {len(outside)} functions in {len(outside_mods)} modules "
        f"outside trinity/config; {len(inside)} functions inside"
    )
    if summary:
        return
    print("\n## lines per module of trinity/config")
    for path, n in lines:
        print(f"{n:6d}  {path}")
    print("\n## veRL-path readers outside trinity/config (module: lines)")
    for path, line_numbers in sorted(readers.items()):
        print(f"{path}: {', '.join(map(str, line_numbers))}")
    print("\n## whole-Config receivers outside trinity/config (module:function)")
    for row in outside:
        print(row)
    print("\n## whole-Config receivers inside trinity/config (module:function)")
    for row in inside:
        print(row)


if __name__ == "__main__":
    main()
