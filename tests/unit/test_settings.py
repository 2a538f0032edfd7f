from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.platform.settings import SettingsError, load_settings
from tests.support import REPO


def test_a_bad_value_stops_with_the_variable_named(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TESTAMENT_GATEWAY_PORT", "eighty")
    with pytest.raises(SettingsError):
        load_settings()
    assert "TESTAMENT_GATEWAY_PORT" in capsys.readouterr().err


def test_an_unknown_choice_is_refused(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TESTAMENT_OBJECT_STORE", "ftp")
    with pytest.raises(SettingsError):
        load_settings()
    assert "TESTAMENT_OBJECT_STORE" in capsys.readouterr().err


def test_database_url_must_be_postgres(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://x")
    with pytest.raises(SettingsError):
        load_settings()
    assert "DATABASE_URL" in capsys.readouterr().err


def test_a_service_address_must_be_host_port(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TESTAMENT_GRAPH_ADDR", "graph:7004,graph")
    with pytest.raises(SettingsError):
        load_settings()
    err = capsys.readouterr().err
    assert "TESTAMENT_GRAPH_ADDR" in err and "'graph' is not host:port" in err


def test_a_service_process_exits_naming_the_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.graph"], cwd=REPO, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "TESTAMENT_SHUTDOWN_GRACE_S": "-3"}, timeout=60,
    )
    assert result.returncode != 0
    assert "TESTAMENT_SHUTDOWN_GRACE_S" in result.stderr


def test_the_model_cache_is_read_by_settings_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from services.platform.embeddings import provider_from_settings

    monkeypatch.setenv("TESTAMENT_MODEL_CACHE", str(tmp_path / "models"))
    settings = load_settings()
    assert settings.model_cache == tmp_path / "models"
    assert provider_from_settings(settings)._cache_dir == tmp_path / "models"
    monkeypatch.delenv("TESTAMENT_MODEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert provider_from_settings(load_settings())._cache_dir == tmp_path / "xdg" / "testament" / "models"
