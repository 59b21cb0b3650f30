"""The layers of docs/architecture.md, enforced: which project package may import which.

Every `import` and `from ... import` in every module of a package (function bodies included) is
read with `ast`; an import of another project package that the table below does not allow fails
the test with the file and line. A new top-level package must be placed in the table.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# package: the project packages it may import. Read bottom-up: scheduler is the ground floor.
MAY_IMPORT = {
    "scheduler": set(),  # queue, jobs, constants, permissions: Django and the stdlib only
    "media": {"scheduler"},  # job types, FFmpeg, the library, submission
    "workers": {"scheduler", "media"},  # the worker runtime and the stage handlers
    "api": {"scheduler", "media"},  # the HTTP API, tokens, /metrics
    "dashboard": {"scheduler", "media"},  # the operator pages
    "jetencode": {"scheduler", "media", "workers", "api", "dashboard"},  # settings, urls, wsgi: the glue
    "tools": {"scheduler", "media", "workers", "api", "dashboard", "jetencode"},  # soak, screenshots
    "bench": {"scheduler", "media", "workers", "api", "dashboard", "jetencode"},  # benchmarks
}


def project_packages() -> set[str]:
    return {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in {"tests"}}


def imports_of(package: str, root: Path = ROOT):
    """(imported top-level name, file, line) for every absolute import in the package."""
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                yield name.split(".")[0], path.relative_to(root), node.lineno


def test_every_package_has_a_place_in_the_layers():
    assert project_packages() == set(MAY_IMPORT), (
        "add the new package to MAY_IMPORT (and docs/architecture.md)"
    )


def test_packages_import_only_the_layers_below_them():
    known = set(MAY_IMPORT)
    wrong = [
        f"{path}:{line}: {package} imports {target}"
        for package, allowed in MAY_IMPORT.items()
        for target, path, line in imports_of(package)
        if target in known and target != package and target not in allowed
    ]
    assert wrong == [], "\n".join(wrong)


def test_the_checker_sees_an_import_inside_a_function(tmp_path):
    # The check must not be blind to the lazy imports the code base uses to break cycles.
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "__init__.py").write_text("")
    (tmp_path / "scheduler" / "sneaky.py").write_text("def f():\n    from media import jobtypes\n")
    assert ("media", Path("scheduler/sneaky.py"), 2) in list(imports_of("scheduler", tmp_path))
