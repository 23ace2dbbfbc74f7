"""``trinity view``: browse a run's experiences (prompt, response, reward,
model_version, per-token log-probabilities) in the browser or as text."""

from trinity.view.records import (
    ExperienceSource,
    ExperienceView,
    RowProblem,
    TokenView,
    ViewSourceError,
)

__all__ = ["ExperienceSource", "ExperienceView", "RowProblem", "TokenView", "ViewSourceError"]
