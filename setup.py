"""Packaging that pyproject.toml cannot declare: the repository keeps the pages' `templates/`
and `static/` at its top level, and a wheel carries them inside the `pocolobby` package
(`pocolobby/templates`, `pocolobby/static`), where `pocolobby.settings` finds them when
no clone is around them. Everything else about the distribution is in pyproject.toml."""

from __future__ import annotations

from setuptools import find_packages, setup

# Distribution package -> the repository folder it is built from.
PAGE_ASSETS = {"pocolobby.templates": "templates", "pocolobby.static": "static"}

setup(
    packages=[
        *find_packages(include=["pocolobby*", "lobbies*", "console*", "board*"]),
        *PAGE_ASSETS,
    ],
    package_dir=PAGE_ASSETS,
    # lobbies/storage/shape.json: the shape the schema steps make (lobbies/storage/shape.py).
    package_data={"lobbies.storage": ["shape.json"], **{name: ["**/*"] for name in PAGE_ASSETS}},
    exclude_package_data={name: [".keep"] for name in PAGE_ASSETS},
)
