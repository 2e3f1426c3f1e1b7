"""Kronecker strategies chosen attribute by attribute (HDMM's OPT_⊗).

A workload that is a union of Kronecker products ``W = [w_k · ⊗_i W_ki]`` and a
strategy ``A = ⊗_i A_i`` give expected error

    ``Π_i ‖A_i‖²  ·  Σ_k w_k² Π_i trace(W_kiᵀW_ki (A_iᵀA_i)⁺)``

(sensitivity of a Kron is the product of the factors'). Fixing every attribute
but ``i`` leaves ``s_i · trace(G̃_i (A_iᵀA_i)⁺)`` with the weighted factor Gram
``G̃_i = Σ_k c_k W_kiᵀW_ki``, ``c_k = w_k² Π_{j≠i} trace_jk``: one attribute's
problem, which a finite candidate list or a template optimizer (p-Identity)
solves. Sweeping the attributes (block coordinate descent) never increases the
error and stops when no attribute changes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

import numpy as np

from dpmm.linalg import Identity, Kron, Matrix, Ones, VStack, Weighted, trace_of_product
from dpmm.linalg.kron import KronTerm, kron_terms
from dpmm.linalg.spectral import row_space_projector
from dpmm.strategy.time_budget import check_time

__all__ = ["FactorOptimizer", "KronTerm", "best_kron_strategy", "kron_terms"]

#: Most sweeps over the attributes before the coordinate descent stops.
MAX_SWEEPS = 20

#: Relative improvement of a whole sweep below which the sweeps stop (a fitted factor
#: comes from random restarts, so its last digits are noise).
SWEEP_IMPROVEMENT = 1e-3

#: Relative part of a factor Gram's trace that may lie outside a candidate's row space.
SUPPORT_TOLERANCE = 1e-9

#: ``optimizer(weighted_gram, norm)`` → (factor strategy of unit sensitivity, its trace loss).
FactorOptimizer = Callable[[np.ndarray, int], tuple[Matrix, float]]


def _factor_key(factor: Matrix) -> tuple:
    """Identify factors that are equal by construction, so their traces are shared."""
    if isinstance(factor, Identity):
        return ("identity", factor.shape[0])
    if isinstance(factor, Ones):
        return ("ones", *factor.shape)
    return ("object", id(factor))


class _Attribute:
    """One attribute's distinct workload factors and the options tried for it so far."""

    def __init__(self, factors: Sequence[Matrix], norm: int) -> None:
        self.norm = norm
        keys = [_factor_key(f) for f in factors]
        self.distinct: dict[tuple, Matrix] = {}
        for key, factor in zip(keys, factors, strict=True):
            self.distinct.setdefault(key, factor)
        self.term_slots = np.array([list(self.distinct).index(k) for k in keys])
        self.grams = {key: factor.gram() for key, factor in self.distinct.items()}
        # Only identities and totals: the weighted Gram is aI + bJ. Under L2 its optimum has
        # a closed form (:meth:`symmetric_optimum`); under L1 no fit is made: a p-Identity
        # fit on such attributes took 20-80 s on the family's marginal workloads, where the
        # fitted Kron was still 100-600× worse than OPT_M's weighted marginals.
        self.symmetric = all(key[0] in ("identity", "ones") for key in self.distinct)
        self.options: list[Matrix] = []
        self.traces: list[np.ndarray] = []  # per option: trace for every term
        self.sensitivity_squared: list[float] = []
        self.fitted: set[tuple] = set()  # the Grams (see ``gram_key``) already fitted to
        self._contents: tuple | None = None

    def gram_key(self, coefficients: np.ndarray) -> tuple:
        """The weighted Gram up to scale: its distinct factor Grams and their relative weights.

        A fit does not depend on the Gram's scale, so one key is fitted once: for a single
        product the attribute's Gram is the same in every sweep, and attributes with equal
        factors (AllRange(256) ⊗ AllRange(256)) share it. Factors are told apart by the
        bytes of their dense Grams (formed only here, where a fit densifies them anyway).
        """
        if self._contents is None:
            self._contents = tuple(
                key if key[0] != "object" else hashlib.sha256(gram.dense().tobytes()).hexdigest()
                for key, gram in self.grams.items()
            )
        per_factor = np.bincount(self.term_slots, weights=coefficients, minlength=len(self.grams))
        mix = per_factor / per_factor.sum()
        return (self._contents, tuple(float(f"{w:.12g}") for w in mix))

    def symmetric_optimum(self, coefficients: np.ndarray) -> Matrix | None:
        """Under L2, the best factor for a symmetric attribute's weighted Gram ``aI + bJ``.

        ``[a^¼ I; β·1ᵀ]`` with ``β² = (√(a + nb) − √a) / n`` has the Gram ``(aI + bJ)^½``,
        whose diagonal is constant, so it meets the attribute's SVD bound
        ``(trace (aI + bJ)^½)² / n``: no factor does better. None without an identity
        (``a = 0``: the Total candidate is optimal) or without a total (Identity is).
        """
        per_factor = np.bincount(self.term_slots, weights=coefficients, minlength=len(self.grams))
        a = b = 0.0
        for (kind, *shape), weight in zip(self.distinct, per_factor, strict=True):
            if kind == "identity":
                a += weight
            else:  # Ones(m, n): Gram m·J
                b += weight * shape[0]
        n = next(iter(self.distinct.values())).shape[1]
        if not (a > 0 and b > 0):
            return None
        total = math.sqrt((math.sqrt(a + n * b) - math.sqrt(a)) / n)
        return VStack([Weighted(a**0.25, Identity(n)), Weighted(total, Ones(1, n))])

    def add(self, option: Matrix) -> int | None:
        """Add an option that supports every factor; its index, or None if it cannot answer."""
        pinv = option.gram().pinv()
        per_factor = []
        for gram in self.grams.values():
            trace = trace_of_product(gram, pinv)
            if not option.known_full_column_rank and not _supports(option, gram):
                return None
            per_factor.append(trace)
        traces = np.asarray(per_factor)
        if not np.all(np.isfinite(traces)) or np.any(traces < 0):  # a numerically broken fit
            return None
        self.options.append(option)
        self.traces.append(traces[self.term_slots])
        self.sensitivity_squared.append(option.sensitivity(self.norm) ** 2)
        return len(self.options) - 1

    def weighted_gram(self, coefficients: np.ndarray) -> np.ndarray:
        """``Σ_k c_k W_kiᵀW_ki`` as a dense array, each distinct factor Gram formed once."""
        per_factor = np.bincount(self.term_slots, weights=coefficients, minlength=len(self.grams))
        return sum(
            c * gram.dense() for c, gram in zip(per_factor, self.grams.values(), strict=True)
        )


def _supports(option: Matrix, gram: Matrix) -> bool:
    """Whether every query behind ``gram`` lies in the row space of ``option``."""
    total = gram.trace()
    captured = trace_of_product(gram, row_space_projector(option))
    return captured >= total * (1 - SUPPORT_TOLERANCE) - SUPPORT_TOLERANCE


def best_kron_strategy(
    W: Matrix,
    candidates: Callable[[int], Sequence[Matrix]],
    norm: int,
    optimizer: FactorOptimizer | None = None,
) -> tuple[Matrix, float]:
    """The Kron of per-attribute factors with the least expected error found, and that error.

    The error is returned up to the privacy constant (i.e. at sensitivity 1 noise variance 1).
    ``candidates(n)`` lists the factors allowed for an attribute of size n; a candidate
    that cannot answer one of the attribute's workload factors is skipped. With an
    ``optimizer``, each sweep also asks it for the best factor against the attribute's
    weighted Gram, and keeps that factor when it lowers the error.
    """
    terms = kron_terms(W)
    dims = len(terms[0].factors)
    weights = np.array([term.weight**2 for term in terms])
    attributes = [_Attribute([t.factors[i] for t in terms], norm) for i in range(dims)]
    for attribute in attributes:
        for option in candidates(next(iter(attribute.distinct.values())).shape[1]):
            attribute.add(option)

    def parts(choice: list[int], skip: int) -> tuple[np.ndarray, float]:
        """Per-term trace product and sensitivity² product over every attribute but ``skip``."""
        traces = np.ones(len(terms))
        scale = 1.0
        for j, c in enumerate(choice):
            if j != skip:
                traces = traces * attributes[j].traces[c]
                scale *= attributes[j].sensitivity_squared[c]
        return traces, scale

    def best_option(i: int, coefficients: np.ndarray) -> tuple[int, float]:
        attribute = attributes[i]
        costs = [
            s * float(t @ coefficients)
            for t, s in zip(attribute.traces, attribute.sensitivity_squared, strict=True)
        ]
        c = int(np.argmin(costs)) if costs else -1
        return c, (costs[c] if costs else math.inf)

    choice = [best_option(i, weights)[0] for i in range(dims)]
    if optimizer is None and any(c < 0 for c in choice):
        raise ValueError(f"No candidate factor can answer the workload {W!r}")
    if optimizer is not None:
        for i in range(dims):  # seed attributes without an admissible candidate
            if choice[i] < 0:  # no candidate answers it, so it is not symmetric
                factor, _ = optimizer(attributes[i].weighted_gram(weights), norm)
                choice[i] = attributes[i].add(factor)
    fits: dict[tuple, Matrix] = {}  # by the fitted Gram's key, shared by the attributes
    best = math.inf
    for _ in range(1 if dims == 1 else MAX_SWEEPS):  # one attribute: nothing to sweep
        previous = best
        for i in range(dims):
            check_time()
            others, scale = parts(choice, i)
            coefficients = weights * others
            c, cost = best_option(i, coefficients)
            attribute = attributes[i]
            symmetric_l2 = optimizer is not None and attribute.symmetric and norm == 2
            key = (
                None
                if optimizer is None or (attribute.symmetric and not symmetric_l2)
                else attribute.gram_key(coefficients)
            )
            if symmetric_l2 and key not in attribute.fitted:  # a closed form, not a fit
                attribute.fitted.add(key)
                optimum = attribute.symmetric_optimum(coefficients)
                if optimum is not None and attribute.add(optimum) is not None:
                    c, cost = best_option(i, coefficients)
            elif key is not None and key not in attribute.fitted:
                attribute.fitted.add(key)
                if key not in fits:
                    fits[key] = optimizer(attribute.weighted_gram(coefficients), norm)[0]
                if attribute.add(fits[key]) is not None:
                    c, cost = best_option(i, coefficients)
            choice[i] = c
            best = scale * cost
        if best >= previous * (1 - SWEEP_IMPROVEMENT):
            break
    factors = [attributes[i].options[c] for i, c in enumerate(choice)]
    return (factors[0] if dims == 1 else Kron(factors)), best
