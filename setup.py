"""Packaging: the repository's folders become subpackages of the one top-level ``reactq``.

``shared/``, ``workers/`` and ``dispatcher/`` stay where DESIGN.md puts them in the checkout,
but installed (wheel or editable) they are ``reactq.shared``, ``reactq.workers`` and
``reactq.dispatcher``, so reactq shadows no application's own ``shared`` or ``workers``.
Everything else is in ``pyproject.toml``; only this mapping needs code (a package list that
follows new subpackages without being edited).
"""

import os

from setuptools import find_packages, setup

FOLDERS = ("shared", "workers", "dispatcher")

packages = ["reactq"]
package_dir = {"reactq": "reactq"}
for folder in FOLDERS:
    for pkg in find_packages(include=[folder, f"{folder}.*"]):
        packages.append(f"reactq.{pkg}")
        package_dir[f"reactq.{pkg}"] = pkg.replace(".", "/")



def data_files(pkg_dir: str) -> list[str]:
    """A package's files that are not Python: samples, the viewer's static files. Subfolders
    that are packages themselves are left to their own entry."""
    found = []
    for sub, dirs, files in os.walk(pkg_dir):
        if sub != pkg_dir and "__init__.py" in files:
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.relpath(os.path.join(sub, f), pkg_dir) for f in files
                  if not f.endswith((".py", ".pyc"))]
    return found


package_data = {pkg: data_files(path) for pkg, path in package_dir.items()}
setup(packages=packages, package_dir=package_dir,
      package_data={pkg: files for pkg, files in package_data.items() if files})
