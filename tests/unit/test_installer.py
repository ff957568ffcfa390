"""uv gets pip's find-links, constraints and indexes, compiles bytecode, and takes torch from the local wheel."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.tags import sys_tags

from harness.targets import venv_install as installer


@pytest.fixture
def find_links(tmp_path: Path) -> Path:
    tag = next(iter(sys_tags()))
    for version in ("2.12.0", "2.13.0+cpu"):
        (tmp_path / f"torch-{version}-{tag.interpreter}-{tag.abi}-{tag.platform}.whl").write_bytes(b"")
    (tmp_path / "torch-2.13.0-cp27-none-any.whl.txt").write_text("not a wheel")
    return tmp_path


def test_pip_settings_come_from_config_files_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /from/config\nconstraint = /c.txt\n")
    monkeypatch.setattr(installer, "PIP_CONFIG_FILES", ())
    environ = {"PIP_CONFIG_FILE": str(config), "PIP_FIND_LINKS": "/from/env /other"}
    settings = installer.pip_settings(environ)
    assert settings["find-links"] == ["/from/env", "/other"]
    assert settings["constraint"] == ["/c.txt"]


def test_uv_install_passes_pip_settings_and_the_local_torch_wheel(
    find_links: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(installer, "pip_settings", lambda: {"find-links": [str(find_links)], "constraint": ["/c"]})
    command = installer.install_command(["megatron-core==0.15.3", "torch==2.13.0", "numpy<2"], "uv")
    assert "--compile-bytecode" in command
    assert command[command.index("--find-links") + 1] == str(find_links)
    assert command[command.index("--constraint") + 1] == "/c"
    torch_args = [a for a in command if "torch" in a]
    assert len(torch_args) == 1 and torch_args[0].endswith(".whl") and "2.13.0+cpu" in torch_args[0]


def test_pip_install_is_left_to_pip_configuration() -> None:
    assert installer.install_command(["torch==2.13.0"], "venv") == ["torch==2.13.0"]


def test_no_local_wheel_keeps_the_requirement(find_links: Path) -> None:
    assert installer.local_wheel("torch==2.99.0", [str(find_links)]) is None
