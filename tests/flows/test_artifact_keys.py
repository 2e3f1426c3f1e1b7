"""Artifact keys from any release or dataset name are keys Prefect accepts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prefect.client.schemas.actions import ArtifactCreate

from flows.artifact_keys import artifact_key


def _accepted(key: str) -> bool:
    try:
        ArtifactCreate(key=key, type="markdown", data="x")
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("adult-marginals", "dpmm-release-adult-marginals"),
        ("Adult_2020.v1", "dpmm-release-adult-2020-v1-"),
        ("census..2030__", "dpmm-release-census-2030-"),
    ],
)
def test_release_names_with_dots_and_underscores_key_as_prefect_requires(name, key) -> None:
    found = artifact_key("dpmm-release", name)
    assert _accepted(found)
    # A name in key form keys as itself; one that had to change gets a digest after it.
    assert found == key if not key.endswith("-") else found.startswith(key)
    assert len(found) == len(key) + (10 if key.endswith("-") else 0)


@given(st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=6, unique=True))
def test_different_names_give_different_keys(names: list[str]) -> None:
    keys = {artifact_key("dpmm-release", name) for name in names}
    assert len(keys) == len(names)


def test_names_differing_only_in_case_dots_or_underscores_key_apart() -> None:
    names = ["a_b", "a.b", "A-B", "a-b"]
    assert len({artifact_key("dpmm-plan", name) for name in names}) == 4


def test_a_lowercased_name_alone_is_not_a_key() -> None:
    assert not _accepted("dpmm-release-adult_2020.v1")


@given(st.text(min_size=1, max_size=40))
def test_every_dataset_name_gives_an_accepted_key(name: str) -> None:
    assert _accepted(artifact_key("dpmm-budget", name))
