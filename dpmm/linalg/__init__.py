"""Implicit matrices: every type is a ``scipy.sparse.linalg.LinearOperator``.

Example:
    >>> import numpy as np
    >>> from dpmm.linalg import Kron, Prefix, Identity
    >>> W = Kron([Prefix(3), Identity(2)])
    >>> W.shape, W.sensitivity(1)
    ((6, 6), 3.0)
    >>> np.allclose(W @ np.ones(6), W.dense() @ np.ones(6))
    True
"""

from dpmm.linalg.base import DENSE_LIMIT, Matrix, check_dense_size
from dpmm.linalg.combinators import (
    Dense,
    HStack,
    Product,
    Sparse,
    Sum,
    Transposed,
    VStack,
    Weighted,
)
from dpmm.linalg.elementary import AllRange, Identity, Ones, Prefix, RangeQueries
from dpmm.linalg.hierarchy import Haar, Hierarchical, tree_intervals
from dpmm.linalg.kron import Kron
from dpmm.linalg.marginals import Marginal, Marginals, MarginalsGram, attribute_mask
from dpmm.linalg.serialize import (
    SerializationError,
    load_matrix,
    matrix_digest,
    matrix_from_spec,
    matrix_to_spec,
    save_matrix,
)
from dpmm.linalg.trace import trace_of_product
from dpmm.linalg.variance import query_variances

__all__ = [
    "DENSE_LIMIT",
    "AllRange",
    "Dense",
    "HStack",
    "Haar",
    "Hierarchical",
    "Identity",
    "Kron",
    "Marginal",
    "Marginals",
    "MarginalsGram",
    "Matrix",
    "Ones",
    "Prefix",
    "Product",
    "RangeQueries",
    "SerializationError",
    "Sparse",
    "Sum",
    "Transposed",
    "VStack",
    "Weighted",
    "attribute_mask",
    "check_dense_size",
    "load_matrix",
    "matrix_digest",
    "matrix_from_spec",
    "matrix_to_spec",
    "query_variances",
    "save_matrix",
    "trace_of_product",
    "tree_intervals",
]
