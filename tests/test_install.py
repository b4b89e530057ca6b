"""A non-editable install into a fresh virtualenv ships the presets."""

from __future__ import annotations

import json
import subprocess
import venv

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_non_editable_install_lists_presets(tmp_path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    py = env_dir / "bin" / "python"
    # Build from a copy-free source path; dependencies come from the same index as make test.
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True,
                   cwd=tmp_path, capture_output=True)
    out = subprocess.run([str(env_dir / "bin" / "tcalc"), "presets", "--format", "json"],
                         check=True, cwd=tmp_path, capture_output=True, text=True).stdout
    names = {p["name"] for p in json.loads(out)}
    shipped = {p.stem for p in (ROOT / "configs").glob("*.yaml")}
    assert names == shipped and len(names) >= 10
    # and it really runs from site-packages, not from the source tree
    code = "import transformer_calc; print(transformer_calc.__file__)"
    where = subprocess.run([str(py), "-c", code], check=True, cwd=tmp_path,
                           capture_output=True, text=True).stdout
    assert "site-packages" in where
