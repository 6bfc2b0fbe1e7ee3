"""The schema registry's settings, ports and command line, and its wiring into `cdc infra` (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.cli import build_parser
from infra.errors import ArtifactDownloadError
from infra.registry import registry_argv, registry_spec
from infra.settings import REGISTRY_VERSION, InfraSettings
from infra.stack import LocalStack


def _settings(tmp_path: Path, **overrides: object) -> InfraSettings:
    return InfraSettings.from_env(home=tmp_path / "home", cache=tmp_path / "cache", **overrides)


def test_defaults_port_8081_off_and_cached_by_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CDC_REGISTRY", "CDC_REGISTRY_PORT", "CDC_REGISTRY_HEAP_MB"):
        monkeypatch.delenv(name, raising=False)
    settings = _settings(tmp_path)
    assert settings.registry_port == 8081
    assert settings.registry is False
    assert settings.registry_heap_mb == 256
    assert settings.registry_version == REGISTRY_VERSION == "2.6.13.Final"
    assert settings.registry_dist == tmp_path / "cache" / "apicurio-registry-2.6.13.Final"


def test_environment_moves_the_port_and_turns_it_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_REGISTRY_PORT", "23081")
    monkeypatch.setenv("CDC_REGISTRY", "1")
    monkeypatch.setenv("CDC_REGISTRY_HEAP_MB", "192")
    settings = _settings(tmp_path)
    assert (settings.registry_port, settings.registry, settings.registry_heap_mb) == (23081, True, 192)
    assert _settings(tmp_path, registry_port=24081).registry_port == 24081  # the command line wins


@pytest.mark.parametrize("port", [0, 65_536])
def test_a_port_outside_tcp_range_is_refused(tmp_path: Path, port: int) -> None:
    with pytest.raises(ValueError, match="registry_port"):
        _settings(tmp_path, registry_port=port)


def test_a_tiny_heap_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="registry_heap_mb"):
        _settings(tmp_path, registry_heap_mb=64)


def test_spec_urls_files_and_a_loopback_small_jvm(tmp_path: Path) -> None:
    settings = _settings(tmp_path, registry_port=23081)
    spec = registry_spec(settings)
    assert spec.ccompat_url == "http://127.0.0.1:23081/apis/ccompat/v7"
    assert spec.log_file == settings.logs / "registry.log"
    assert spec.root == settings.home / "registry"
    argv = registry_argv(Path("/jdk/bin/java"), Path("/dist/runner.jar"), spec)
    assert argv[0] == "/jdk/bin/java" and argv[-2:] == ["-jar", "/dist/runner.jar"]
    assert spec.marker in argv  # the pid file only matches this home's registry
    assert "-Dquarkus.http.host=127.0.0.1" in argv
    assert "-Dquarkus.http.port=23081" in argv
    assert {"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"} <= set(argv)


def test_status_lists_the_registry_only_once_asked_for(tmp_path: Path) -> None:
    assert "registry" not in {row.service for row in LocalStack(_settings(tmp_path)).status()}
    rows = {row.service: row for row in LocalStack(_settings(tmp_path, registry=True)).status()}
    assert not rows["registry"].running
    assert rows["registry"].endpoint == "http://127.0.0.1:8081/apis/ccompat/v7"


def test_down_without_a_registry_is_quiet(tmp_path: Path) -> None:
    said: list[str] = []
    LocalStack(_settings(tmp_path, registry=True)).down(report=said.append)
    assert said == []


def test_a_broken_dist_names_the_fix(tmp_path: Path) -> None:
    from infra.artifacts import registry_runner

    with pytest.raises(ArtifactDownloadError, match="cdc infra fetch"):
        registry_runner(tmp_path)


def test_cli_flags() -> None:
    parser = build_parser()
    assert parser.parse_args(["infra", "up"]).registry is False
    assert parser.parse_args(["infra", "up", "--registry"]).registry is True
    assert parser.parse_args(["infra", "fetch"]).no_registry is False
    assert parser.parse_args(["infra", "fetch", "--no-registry"]).no_registry is True
