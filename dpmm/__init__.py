"""dpmm: differentially private releases of linear queries with the matrix mechanism."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dpmm")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
