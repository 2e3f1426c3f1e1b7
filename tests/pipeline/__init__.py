"""Tests of the release pipeline: end to end on Adult, under faults, and on bad input."""
