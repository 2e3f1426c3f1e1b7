"""The demo: a synthetic census-like dataset and the release config that goes with it.

Example:
    >>> "name: demo-census" in census_config_text()
    True
"""

from importlib.resources import files

from dpmm.demo.census import CensusDataset, write_census_dataset

__all__ = ["CensusDataset", "census_config_text", "write_census_dataset"]

#: The config template's file name inside this package.
CONFIG_TEMPLATE = "census.yaml"


def census_config_text() -> str:
    """The demo release config (YAML text); its paths are relative to the folder it is saved in."""
    return files(__package__).joinpath(CONFIG_TEMPLATE).read_text(encoding="utf-8")
