"""Run a Data-Juicer recipe over rows in this process.

A recipe is Data-Juicer's ``process`` list: one ``{operator name: {args}}`` mapping per
operator, applied in order (``[{"text_length_filter": {"min_len": 10}}]``). Rows are
plain dicts; filters drop rows and add their statistics to each kept row under
``__dj__stats__`` (``{"text_len": 20}``), as plain JSON values.

Data-Juicer is optional (``pip install py-data-juicer``, or the ``data_juicer`` extra)
and imported only when a runner is built. Both the in-process ``data_juicer`` operator
and the Data-Juicer service (``server.py``) run recipes through ``DataJuicerRunner``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

PIP_PACKAGE = "py-data-juicer"
STATS_FIELD = "__dj__stats__"


class DataJuicerMissingError(ImportError):
    """Data-Juicer is needed here but not installed."""


def require_data_juicer(who: str) -> None:
    """Raise ``DataJuicerMissingError`` naming ``who`` needs it, unless Data-Juicer imports."""
    if importlib.util.find_spec("data_juicer") is None:
        raise DataJuicerMissingError(
            f"{who} needs Data-Juicer, which is not installed: pip install {PIP_PACKAGE} "
            "(or pip install 'trinity-rft[data_juicer]')"
        )


class DataJuicerRunner:
    """Loads a recipe's operators once and runs them over lists of rows."""

    def __init__(self, process: list[Any]) -> None:
        require_data_juicer("the 'data_juicer' operator")
        self._ops = importlib.import_module("data_juicer.ops").load_ops(process)
        self._dataset_cls = importlib.import_module("data_juicer.core.data").NestedDataset

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        dataset = self._dataset_cls.from_list(rows)
        for op in self._ops:
            dataset = op.run(dataset)
        out = dataset.to_list()
        for row in out:
            if STATS_FIELD in row:
                row[STATS_FIELD] = {k: plain(v) for k, v in (row[STATS_FIELD] or {}).items()}
        return out


def plain(value: Any) -> Any:
    """A JSON-storable copy of a statistic (numpy scalars and arrays become numbers/lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
