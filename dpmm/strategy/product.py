"""Kronecker strategies chosen attribute by attribute (HDMM's OPT_⊗ idea, over finite candidates).

A workload that is a union of Kronecker products ``W = [w_k · ⊗_i W_ki]`` and a
strategy ``A = ⊗_i A_i`` give expected error

    ``Π_i ‖A_i‖²  ·  Σ_k w_k² Π_i trace(W_kiᵀW_ki (A_iᵀA_i)⁺)``

(sensitivity of a Kron is the product of the factors'). Each attribute picks
its factor from a candidate list; with one product the attributes separate,
and with a union we sweep attributes (block coordinate descent) until no
choice changes. Every candidate's per-attribute trace is computed once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpmm.linalg import Identity, Kron, Matrix, Ones, VStack, Weighted, trace_of_product

__all__ = ["KronTerm", "best_kron_strategy", "kron_terms"]

#: Most sweeps over the attributes before the coordinate descent stops.
MAX_SWEEPS = 20


@dataclass(frozen=True)
class KronTerm:
    """One product of a union: ``weight · ⊗ factors``."""

    weight: float
    factors: tuple[Matrix, ...]


def kron_terms(W: Matrix) -> list[KronTerm]:
    """W as a union of weighted Kronecker products with aligned columns.

    A matrix with no Kronecker structure is one term with a single factor.
    """
    terms = _terms(W, 1.0)
    sizes = {tuple(f.shape[1] for f in term.factors) for term in terms}
    if len(sizes) != 1:
        return [KronTerm(1.0, (W,))]
    return terms


def _terms(W: Matrix, weight: float) -> list[KronTerm]:
    if isinstance(W, Weighted):
        return _terms(W.base, weight * W.weight)
    if isinstance(W, VStack):
        return [term for block in W.blocks for term in _terms(block, weight)]
    if isinstance(W, Kron):
        return [KronTerm(weight, tuple(W.factors))]
    return [KronTerm(weight, (W,))]


def _factor_key(factor: Matrix) -> tuple:
    """Identify factors that are equal by construction, so their traces are shared."""
    if isinstance(factor, Identity):
        return ("identity", factor.shape[0])
    if isinstance(factor, Ones):
        return ("ones", *factor.shape)
    return ("object", id(factor))


def best_kron_strategy(
    W: Matrix,
    candidates: Callable[[int], Sequence[Matrix]],
    norm: int,
) -> tuple[Matrix, float]:
    """The Kron of per-attribute candidates with the least expected error, and that error.

    The error is returned up to the privacy constant (i.e. at sensitivity 1 noise variance 1).
    ``candidates(n)`` lists the factors allowed for an attribute of size n.
    """
    terms = kron_terms(W)
    dims = len(terms[0].factors)
    by_size: dict[int, list[Matrix]] = {}
    for factor in terms[0].factors:
        by_size.setdefault(factor.shape[1], list(candidates(factor.shape[1])))
    options = [by_size[f.shape[1]] for f in terms[0].factors]
    weights = np.array([term.weight**2 for term in terms])
    # traces[i][c, k] = trace(W_kiᵀ W_ki (A_icᵀ A_ic)⁺); cost O(Σ_i |options_i| · distinct W_ki).
    traces = []
    pinvs_by_size = {n: [option.gram().pinv() for option in opts] for n, opts in by_size.items()}
    for i in range(dims):
        pinvs = pinvs_by_size[terms[0].factors[i].shape[1]]
        cache: dict[tuple, np.ndarray] = {}
        table = np.empty((len(options[i]), len(terms)))
        for k, term in enumerate(terms):
            key = _factor_key(term.factors[i])
            if key not in cache:
                gram = term.factors[i].gram()
                cache[key] = np.array([trace_of_product(gram, pinv) for pinv in pinvs])
            table[:, k] = cache[key]
        traces.append(table)
    sensitivity_squared = [
        np.array([option.sensitivity(norm) ** 2 for option in options[i]]) for i in range(dims)
    ]

    def cost(choice: list[int]) -> float:
        products = np.prod([traces[i][c] for i, c in enumerate(choice)], axis=0)
        scale = math.prod(sensitivity_squared[i][c] for i, c in enumerate(choice))
        return float(scale * (weights * products).sum())

    choice = [int(np.argmin(sensitivity_squared[i] * (traces[i] @ weights))) for i in range(dims)]
    best = cost(choice)
    for _ in range(MAX_SWEEPS):
        improved = False
        for i in range(dims):
            for c in range(len(options[i])):
                trial = [*choice[:i], c, *choice[i + 1 :]]
                value = cost(trial)
                if value < best * (1 - 1e-12):
                    choice, best, improved = trial, value, True
        if not improved:
            break
    factors = [options[i][c] for i, c in enumerate(choice)]
    return (factors[0] if dims == 1 else Kron(factors)), best
