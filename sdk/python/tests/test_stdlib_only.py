"""The package needs nothing but the standard library, on Python 3.9+."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import PKG_DIR, SDK_DIR

# Run with -I (isolated: no PYTHON* variables, no user site) and -S (no
# site module: no site-packages at all), so any import outside the standard
# library fails. Then every loaded module must come from the standard
# library (or the package itself).
CHECK = f"""
import sys, sysconfig
sys.path.insert(0, {PKG_DIR!r})
import runbox, runbox.errors, runbox.models, runbox.files, runbox.process, runbox.popen, runbox.local, runbox.aio
assert "site" not in sys.modules
stdlib = sysconfig.get_paths()["stdlib"]
names = getattr(sys, "stdlib_module_names", set())
for name, mod in sorted(sys.modules.items()):
    f = getattr(mod, "__file__", None)
    top = name.split(".")[0]
    ok = (top == "runbox" and f and f.startswith({PKG_DIR!r})) or top in names or top in sys.builtin_module_names \\
        or f is None or f.startswith(stdlib)
    assert ok, (name, f)
print("ok", runbox.__version__, len(runbox.__all__))
"""


def run_check(python: str) -> str:
    out = subprocess.run([python, "-I", "-S", "-c", CHECK], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_imports_with_only_the_standard_library() -> None:
    assert run_check(sys.executable).startswith("ok 0.1.0")


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.12", "3.13"])
def test_other_pythons(version: str) -> None:
    """Where other Python versions are installed, the package imports there
    too (3.9 is the oldest supported)."""
    python = shutil.which("python" + version)
    if python is None:
        pytest.skip(f"python{version} is not installed (optional: the package is checked on whatever is)")
    if subprocess.run([python, "-c", "pass"], capture_output=True).returncode != 0:
        pytest.skip(f"python{version} is a shim without an interpreter")
    assert run_check(python).startswith("ok")


def test_pyproject_declares_no_dependency() -> None:
    import re

    with open(f"{SDK_DIR}/pyproject.toml") as f:
        text = f.read()
    assert re.search(r"^dependencies = \[\]$", text, re.M)
    assert 'requires-python = ">=3.9"' in text


def test_types_check_strictly() -> None:
    """The package is typed (py.typed): mypy --strict finds nothing, for
    the oldest Python it supports. CI installs mypy (Debian's package)."""
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        if os.environ.get("RUNBOX_REQUIRE_PYTHON") == "1":
            pytest.fail("mypy is required (RUNBOX_REQUIRE_PYTHON=1): apt-get install mypy")
        pytest.skip("mypy is not installed: apt-get install mypy")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.9", "--cache-dir", os.devnull, "runbox"],
        cwd=SDK_DIR,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
