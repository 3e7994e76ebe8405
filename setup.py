"""Packaging: the repository's folders become subpackages of the one top-level ``reactq``.

``shared/``, ``workers/`` and ``dispatcher/`` stay at the top of the checkout, but installed
(wheel or editable) they are ``reactq.shared``, ``reactq.workers`` and ``reactq.dispatcher``,
so reactq shadows no application's own ``shared`` or ``workers``. Everything else is in
``pyproject.toml``; only this mapping needs code (a package list that follows new
subpackages without being edited).

Folders that hold only data (the demo's sample questions, the viewer's static files) are
listed as namespace packages with their files as package data: setuptools treats every folder
under a package as importable, and one missing from ``packages`` is warned about and dropped.
"""

import os

from setuptools import find_namespace_packages, setup

FOLDERS = ("shared", "workers", "dispatcher")
SKIP = ("__pycache__",)

packages = ["reactq"]
package_dir = {"reactq": "reactq"}
for folder in FOLDERS:
    for pkg in find_namespace_packages(include=[folder, f"{folder}.*"]):
        if any(part in SKIP for part in pkg.split(".")):
            continue
        packages.append(f"reactq.{pkg}")
        package_dir[f"reactq.{pkg}"] = pkg.replace(".", "/")


def data_files(pkg_dir: str) -> list[str]:
    """A package folder's own files that are not Python (each subfolder is a package too)."""
    return sorted(f for f in os.listdir(pkg_dir)
                  if os.path.isfile(os.path.join(pkg_dir, f)) and not f.endswith((".py", ".pyc")))


package_data = {pkg: data_files(path) for pkg, path in package_dir.items()}
setup(packages=packages, package_dir=package_dir,
      package_data={pkg: files for pkg, files in package_data.items() if files})
