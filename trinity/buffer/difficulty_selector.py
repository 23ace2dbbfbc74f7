"""``difficulty_based`` task selection: draw the tasks the policy solves about
``target_reward`` of the time (BOTS, Bayesian online task selection).

Each task ``i`` holds a Beta(alpha_i, beta_i) belief over its pass rate (the chance the
policy solves it), Beta(1, 1) at the start. The taskset's ``feature_keys`` columns give
prior pass rates of two reference models, ``f0`` (weaker) and ``f1`` (stronger); one
capability coefficient ``c`` places the policy between them, so a task not rolled out in
a step is predicted to pass at ``p~ = clip(f0 + c (f1 - f0), 0, 1)``. With one column,
``f0 = f1`` and the prediction is that column.

After each explore step the tasks it rolled out report their observed pass rates ``r``
(the mean accuracy of their rollouts); with S the set of those tasks::

    c_obs = (mean r - mean f0[S]) / (mean f1[S] - mean f0[S] + 1e-6)
    c     = c_obs at the first update, else 0.9 c + 0.1 c_obs
    p~[S] = r;   s = m r and f = m (1 - r) on S, 0 elsewhere
    alpha = (1 - lamb) alpha + lamb + (1 - rho) s + rho m p~
    beta  = (1 - lamb) beta  + lamb + (1 - rho) f + rho m (1 - p~)

``lamb`` forgets old evidence, ``m`` is how many rollouts one observation counts as,
``rho`` weighs the predicted pseudo-counts against the observed ones (on S they add up to
``m r`` successes). With ``adaptive_rho`` rho halves each time the prediction misses the
observed pass rates by 0.25 or more on average.

A draw scores every task ``-|target_reward - p|`` (``p``: the posterior mean, or with
``do_sample`` one sample of each Beta) and takes ``count`` tasks: the best when ``tau``
is 0, else without replacement from ``softmax(scores / tau)``. Names and defaults of the
settings follow Trinity-RFT's ``DifficultyBasedSelector`` (``data_selector.kwargs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_CAPABILITY_DISCOUNT = 0.9  # weight of the old capability coefficient in its running mean
_ADAPTIVE_RHO_MISS = 0.25  # mean prediction error that halves rho (adaptive_rho)


@dataclass(frozen=True)
class DifficultySettings:
    """``data_selector.kwargs`` of a ``difficulty_based`` taskset."""

    target_reward: float = 1.0  # pass rate the draws aim at
    tau: float = 1.0  # sampling temperature of the scores; 0: the best tasks
    do_sample: bool = False  # score a sample of each Beta instead of its mean
    m: float = 16  # rollouts one observed pass rate counts as
    lamb: float = 0.2  # forgetting rate of the Beta counts
    rho: float = 0.2  # weight of predicted pseudo-counts against observed ones
    adaptive_rho: bool = False  # halve rho when predictions miss by 0.25 or more

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None, where: str) -> DifficultySettings:
        """The settings ``kwargs`` names; ValueError naming ``where`` for a bad one."""
        names = [f.name for f in dataclasses.fields(cls)]
        given = dict(kwargs or {})
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(
                f"{where}: unknown difficulty_based setting(s) {unknown} (valid: {', '.join(names)})"
            )
        for name, value in given.items():
            if isinstance(value, bool) != isinstance(getattr(cls, name), bool) or not isinstance(
                value, int | float
            ):
                kind = "true or false" if isinstance(getattr(cls, name), bool) else "a number"
                raise ValueError(f"{where}: {name} must be {kind}, got {value!r}")
        settings = cls(**given)
        for name, low in (("tau", 0.0), ("m", 0.0), ("rho", 0.0), ("lamb", 0.0)):
            if getattr(settings, name) < low:
                raise ValueError(f"{where}: {name} must be >= 0, got {getattr(settings, name)}")
        if settings.lamb > 1 or settings.rho > 1:
            raise ValueError(f"{where}: lamb and rho must lie in [0, 1]")
        return settings


class DifficultySelector:
    """Beta beliefs over the pass rates of ``len(features)`` tasks, and draws from them.

    ``features``: (N, 2) prior pass rates (f0, f1) per task, or (N, 1) for one column.
    Draw ``k`` uses the generator ``numpy.random.default_rng([seed, k])``, so the draws
    are a pure function of the seed, the number of draws and the beliefs.
    """

    def __init__(self, features: np.ndarray, settings: DifficultySettings, seed: int) -> None:
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] not in (1, 2) or len(features) == 0:
            raise ValueError(f"features must have shape (N, 1) or (N, 2), got {features.shape}")
        if features.shape[1] == 1:
            features = np.repeat(features, 2, axis=1)
        self.features = features  # (N, 2)
        self.settings = settings
        self.seed = seed
        n = len(features)
        self.alphas = np.ones(n)  # (N,)
        self.betas = np.ones(n)  # (N,)
        self.capability: float | None = None  # c; None before the first update
        self.rho = settings.rho
        self.draws = 0

    def __len__(self) -> int:
        return len(self.features)

    def pass_rates(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """(N,) the pass rates the scores use: posterior means, or Beta samples with ``rng``."""
        if rng is not None and self.settings.do_sample:
            return rng.beta(self.alphas, self.betas)
        return self.alphas / (self.alphas + self.betas)

    def scores(self, pass_rates: np.ndarray) -> np.ndarray:
        return -np.abs(self.settings.target_reward - pass_rates)

    def probabilities(self) -> np.ndarray:
        """(N,) chance that one draw from the posterior means picks each task.

        ``softmax(scores / tau)``; with ``tau`` 0 the best-scoring tasks share it all.
        """
        scores = self.scores(self.pass_rates())
        if self.settings.tau == 0:
            best = np.isclose(scores, scores.max(), rtol=0, atol=1e-12)
            return best / best.sum()
        logits = scores / self.settings.tau
        weights = np.exp(logits - logits.max())
        return weights / weights.sum()

    def draw(self, count: int) -> np.ndarray:
        """(count,) distinct task indices: the best (tau 0) or sampled without replacement."""
        if not 0 < count <= len(self):
            raise ValueError(f"a draw takes 1 to {len(self)} tasks, not {count}")
        rng = np.random.default_rng([self.seed % 2**64, self.draws])
        self.draws += 1
        scores = self.scores(self.pass_rates(rng))
        if self.settings.tau > 0:
            # Gumbel-top-k: the same law as drawing one by one without replacement from
            # softmax(scores / tau), and no failure when some weights underflow to 0
            scores = scores / self.settings.tau + rng.gumbel(size=len(scores))
        return np.argsort(-scores, kind="stable")[:count]

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        """Fold in the observed ``pass_rates`` (each in [0, 1]) of the tasks ``indices``."""
        if not len(indices):
            return
        seen = np.asarray(indices, dtype=np.int64)
        observed = np.clip(np.asarray(pass_rates, dtype=np.float64), 0.0, 1.0)
        f0, f1 = self.features[:, 0], self.features[:, 1]
        c_obs = (observed.mean() - f0[seen].mean()) / (f1[seen].mean() - f0[seen].mean() + 1e-6)
        if self.capability is None:
            self.capability = float(c_obs)
        else:
            d = _CAPABILITY_DISCOUNT
            self.capability = float(d * self.capability + (1 - d) * c_obs)
        predicted = np.clip(f0 + (f1 - f0) * self.capability, 0.0, 1.0)
        if self.settings.adaptive_rho:
            if np.abs(predicted[seen] - observed).mean() >= _ADAPTIVE_RHO_MISS:
                self.rho *= 0.5
        predicted[seen] = observed
        successes = np.zeros(len(self))
        failures = np.zeros(len(self))
        m, lamb, rho = self.settings.m, self.settings.lamb, self.rho
        successes[seen] = m * observed
        failures[seen] = m * (1 - observed)
        self.alphas = (1 - lamb) * self.alphas + lamb + (1 - rho) * successes + rho * m * predicted
        self.betas = (
            (1 - lamb) * self.betas + lamb + (1 - rho) * failures + rho * m * (1 - predicted)
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "alphas": self.alphas.tolist(),
            "betas": self.betas.tolist(),
            "capability": self.capability,
            "rho": self.rho,
            "draws": self.draws,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        alphas = np.asarray(state["alphas"], dtype=np.float64)
        if alphas.shape != (len(self),):
            raise ValueError(
                f"the saved beliefs cover {alphas.size} tasks, the taskset has {len(self)}"
            )
        self.alphas = alphas
        self.betas = np.asarray(state["betas"], dtype=np.float64)
        self.capability = state["capability"]
        self.rho = float(state["rho"])
        self.draws = int(state["draws"])
