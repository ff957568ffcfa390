"""Where the source of another megatron-core release is read from: a target venv beside the running one, else the
wheel cache; with neither, and no uv to fetch with, one line that says what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.targets import release_source as module
from harness.targets import uv_lookup
from harness.targets.release_source import ReleaseSourceError, cache_dir, release_source


def fake_install(site_packages: Path, version: str) -> Path:
    (site_packages / "megatron" / "core").mkdir(parents=True)
    (site_packages / f"megatron_core-{version}.dist-info").mkdir()
    return site_packages


def test_a_target_venv_that_has_the_release_is_read_first(tmp_path: Path) -> None:
    fake_install(tmp_path / "venvs" / "megatron-0-14" / "lib" / "python3.11" / "site-packages", "0.14.0")
    wanted = fake_install(tmp_path / "venvs" / "megatron-0-13" / "lib" / "python3.11" / "site-packages", "0.13.1")
    fake_install(tmp_path / "cache" / "megatron-core-0.13.1", "0.13.1")
    found = release_source("0.13.1", venvs=tmp_path / "venvs", cache=tmp_path / "cache")
    assert found.root == wanted and found.origin == f"the target venv {tmp_path / 'venvs' / 'megatron-0-13'}"


def test_the_cache_serves_a_release_no_venv_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "find_uv", lambda: pytest.fail("a cached release was fetched again"))
    cached = fake_install(tmp_path / "cache" / "megatron-core-0.12.0", "0.12.0")
    found = release_source("0.12.0", venvs=tmp_path / "venvs", cache=tmp_path / "cache")
    assert found.root == cached and "cached" in found.origin


def test_without_uv_the_release_cannot_be_fetched_and_the_line_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "find_uv", lambda: None)
    with pytest.raises(ReleaseSourceError, match=r"megatron-core 0\.12\.0: no target venv .* uv, .* nor on PATH"):
        release_source("0.12.0", venvs=tmp_path / "venvs", cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "megatron-core-0.12.0").exists()


def test_the_cache_folder_follows_the_environment(tmp_path: Path) -> None:
    assert cache_dir({"MEGATRON_CONFORMANCE_CACHE": str(tmp_path)}) == tmp_path
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "megatron-conformance"


def test_uv_is_found_beside_the_interpreter_when_its_venv_is_not_activated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command called by its path from a venv nobody activated: ``nox[uv]`` put uv beside the interpreter, and
    ``PATH`` lacks it. Seeded break: with the lookup on ``PATH`` alone, no uv is found."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "uv").write_text("")
    monkeypatch.setattr(uv_lookup.sys, "executable", str(bin_dir / "python"))
    monkeypatch.setitem(sys.modules, "uv", None)
    assert uv_lookup.find_uv(path=str(tmp_path / "empty")) == str(bin_dir / "uv")
    assert uv_lookup.shutil.which("uv", path=str(tmp_path / "empty")) is None
