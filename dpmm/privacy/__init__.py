"""Privacy: exact parameters (pure ε, ρ-zCDP) and, later, accounting, samplers and the ledger."""

from dpmm.privacy.params import ZCDP, PrivacyParameter, PureDP, exact_fraction, privacy_from_config

__all__ = ["ZCDP", "PrivacyParameter", "PureDP", "exact_fraction", "privacy_from_config"]
