"""The installed distribution's metadata, as a package index shows it (``pip show``,
the project page): where the project lives, who makes it, the CPython versions it
supports, the extras each integration needs, and a long description whose links work
on the index and that names nothing the wheel does not ship."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

REPOSITORY = "https://github.com/arenapool/arenapool"

META = metadata.metadata("arenapool")


def test_urls_and_authors():
    urls = dict(value.split(", ", 1) for value in META.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Repository", "Issues"} <= set(urls), urls
    assert all(url.startswith(REPOSITORY) for url in urls.values()), urls
    assert META["Author"] or META["Author-email"], dict(META)
    assert META["License"] or META.get_all("License-Expression"), dict(META)


def test_every_supported_cpython_is_a_classifier():
    classifiers = set(META.get_all("Classifier") or [])
    for minor in range(9, 16):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers, minor
    assert META["Requires-Python"] == ">=3.9"


@pytest.mark.parametrize(
    "extra, needs",
    [
        ("joblib", {"joblib"}),
        ("dask", {"dask", "distributed"}),
        ("ray", {"ray"}),
        ("notebook", {"ipykernel"}),
        ("numpy", {"numpy"}),
    ],
)
def test_each_integration_has_its_extra(extra, needs):
    assert extra in (META.get_all("Provides-Extra") or [])
    pulled = {
        re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
        for requirement in metadata.requires("arenapool") or []
        if re.search(rf"extra == [\"']{extra}[\"']", requirement)
    }
    assert needs <= pulled, (extra, pulled)


def long_description() -> str:
    text = META.get_payload() if hasattr(META, "get_payload") else None  # type: ignore[attr-defined]
    return text or META["Description"] or ""


def test_the_long_description_starts_with_the_install_line():
    text = long_description()
    assert META["Description-Content-Type"].startswith("text/markdown")
    install = text.index("## Install")
    assert "pip install arenapool" in text[install : install + 400], text[install : install + 400]


def test_the_long_description_links_work_on_an_index():
    text = long_description()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets, "no links at all"
    for target in targets:
        assert target.startswith(("https://", "#")), target
        if target.startswith("#"):  # a heading of this description
            heading = target[1:].replace("-", " ")
            assert re.search(rf"^#+ {re.escape(heading)}$", text, re.M | re.I), target


def test_the_long_description_names_only_what_the_wheel_ships():
    text = long_description()
    # Links to the repository name its files; outside them, none is named.
    bare = re.sub(r"\[[^\]]*\]\(https://[^)]*\)", "", text)
    for path in (r"\.ci/", r"(?<![\w/])tests/", r"(?<![\w/])examples/", r"\.\./", r"(?<![\w/])docs/"):
        found = re.findall(rf".{{0,30}}{path}.{{0,30}}", bare)
        assert not found, (path, found)
