"""Packaging: the repository's folders become subpackages of the one top-level ``reactq``.

``shared/``, ``workers/`` and ``dispatcher/`` stay where DESIGN.md puts them in the checkout,
but installed (wheel or editable) they are ``reactq.shared``, ``reactq.workers`` and
``reactq.dispatcher``, so reactq shadows no application's own ``shared`` or ``workers``.
Everything else is in ``pyproject.toml``; only this mapping needs code (a package list that
follows new subpackages without being edited).
"""

from setuptools import find_packages, setup

FOLDERS = ("shared", "workers", "dispatcher")

packages = ["reactq"]
package_dir = {"reactq": "reactq"}
for folder in FOLDERS:
    for pkg in find_packages(include=[folder, f"{folder}.*"]):
        packages.append(f"reactq.{pkg}")
        package_dir[f"reactq.{pkg}"] = pkg.replace(".", "/")

setup(packages=packages, package_dir=package_dir)
