"""Toolchain checks: a wrong or missing toolchain is refused with found-vs-wanted in the message."""

from __future__ import annotations

import importlib.metadata
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import zyfa_toolchains as zt


def fake_nvcc(tmp_path: Path, version: str) -> str:
    """An executable that prints nvcc's --version banner for `version`."""
    path = tmp_path / "nvcc"
    major_minor = ".".join(version.split(".")[:2])
    path.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {major_minor}, V{version}'\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("version", ["12.4.131", "11.8.89", "12.7.99"])
def test_old_nvcc_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_pins: dict, version: str
) -> None:
    monkeypatch.setenv("ZYFA_NVCC", fake_nvcc(tmp_path, version))
    with pytest.raises(zt.ToolchainError) as err:
        zt.find_nvcc(real_pins)
    assert f"nvcc {version} found" in str(err.value)
    assert f">= {real_pins['nvcc']['min_version']}" in str(err.value)


@pytest.mark.parametrize("version", ["12.8.61", "13.0.88", "14.1.2"])
def test_new_enough_nvcc_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_pins: dict, version: str
) -> None:
    monkeypatch.setenv("ZYFA_NVCC", fake_nvcc(tmp_path, version))
    monkeypatch.setattr(zt, "find_cutlass", lambda pins: None)
    tc = zt.find_nvcc(real_pins)
    assert tc.versions == {"nvcc": version}
    assert tc.command == (os.environ["ZYFA_NVCC"],)
    assert "-gencode=arch=compute_90a,code=sm_90a" in tc.flags


def test_missing_nvcc_names_where_it_looked(monkeypatch: pytest.MonkeyPatch, real_pins: dict) -> None:
    monkeypatch.setattr(zt, "_nvcc_path", lambda: (None, ["$ZYFA_NVCC", "PATH", "/usr/local/cuda/bin"]))
    with pytest.raises(zt.ToolchainError, match=r"nvcc not found \(looked at \$ZYFA_NVCC, PATH"):
        zt.find_nvcc(real_pins)


def _fake_version(versions: dict[str, str]) -> Any:
    real = importlib.metadata.version

    def version(name: str) -> str:
        return versions[name] if name in versions else real(name)

    return version


def test_wrong_ziglang_is_refused(monkeypatch: pytest.MonkeyPatch, real_pins: dict) -> None:
    monkeypatch.setattr(zt.importlib.metadata, "version", _fake_version({"ziglang": "0.16.1"}))
    with pytest.raises(zt.ToolchainError) as err:
        zt.find_ziglang(real_pins)
    assert "ziglang 0.16.1 is installed" in str(err.value)
    assert real_pins["ziglang"]["pip"] in str(err.value)


def test_missing_ziglang_says_what_to_install(monkeypatch: pytest.MonkeyPatch, real_pins: dict) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(zt.importlib.metadata, "version", missing)
    with pytest.raises(zt.ToolchainError, match=r"pip install ziglang==0\.17\.0"):
        zt.find_ziglang(real_pins)


def test_wrong_clang_inside_ziglang_is_refused(real_pins: dict) -> None:
    pytest.importorskip("ziglang")
    pins = {**real_pins, "ziglang": {**real_pins["ziglang"], "clang_version": "21.0.0"}}
    if importlib.metadata.version("ziglang") != zt.pinned_version(pins["ziglang"]["pip"]):
        pytest.skip("installed ziglang is not the pinned one")
    with pytest.raises(zt.ToolchainError, match=r"runs clang 22\.\d+\.\d+, but ZYFA pins clang 21\.0\.0"):
        zt.find_ziglang(pins)


def test_wrong_cutlass_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_pins: dict) -> None:
    class Spec:
        submodule_search_locations = [str(tmp_path)]

    monkeypatch.setattr(
        zt.importlib.util, "find_spec", lambda name: Spec() if name == "cutlass_library" else None
    )
    monkeypatch.setattr(zt.importlib.metadata, "version", _fake_version({"nvidia-cutlass": "3.9.2"}))
    with pytest.raises(
        zt.ToolchainError,
        match=r"nvidia-cutlass 3\.9\.2 is installed, but ZYFA pins nvidia-cutlass==4\.2\.0\.0",
    ):
        zt.find_cutlass(real_pins)
    monkeypatch.setattr(zt.importlib.metadata, "version", _fake_version({"nvidia-cutlass": "4.2.0.0"}))
    (tmp_path / "source" / "include").mkdir(parents=True)
    assert zt.find_cutlass(real_pins) == (str(tmp_path / "source" / "include"), "4.2.0.0")


def test_version_helpers() -> None:
    assert zt.version_tuple("13.0.88") == (13, 0, 88)
    assert zt.version_tuple("12.8") < zt.version_tuple("12.8.61") < zt.version_tuple("13.0")
    assert zt.pinned_version("ziglang==0.17.0") == "0.17.0"
    with pytest.raises(zt.BuildError, match="name==version"):
        zt.pinned_version("ziglang>=0.17")


def test_failed_command_shows_command_and_output(tmp_path: Path) -> None:
    with pytest.raises(zt.BuildError) as err:
        zt.run_tool(["sh", "-c", "echo some-diagnostic >&2; exit 3"], dict(os.environ), "probe")
    text = str(err.value)
    assert "probe failed (exit 3)" in text
    assert "$ sh -c 'echo some-diagnostic >&2; exit 3'" in text
    assert "some-diagnostic" in text
