import json
import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from app.core.paths import app_paths
from app.core.settings import Settings, SettingsStore


def test_hearth_home_overrides_every_directory(hearth_home):
    paths = app_paths().ensure()
    for p in (paths.config, paths.data, paths.models, paths.logs, paths.cache):
        assert p.is_dir()
        assert hearth_home in p.parents


def test_round_trip(hearth_home):
    store = SettingsStore(app_paths().settings_file)
    s = Settings(models_dir="/tmp/my-models", log_level="DEBUG", measure_bandwidth_on_start=False)
    s.window.geometry = "AAEC"
    store.save(s)
    loaded = store.load()
    assert loaded == s
    assert json.loads(store.path.read_text())["log_level"] == "DEBUG"


def test_changed_event_fires_on_save(tmp_path):
    store = SettingsStore(tmp_path / "s.json")
    seen = []
    store.changed.connect(seen.append)
    store.save(Settings(log_level="ERROR"))
    assert [s.log_level for s in seen] == ["ERROR"]


def test_invalid_values_are_rejected():
    with pytest.raises(ValidationError):
        Settings(log_level="LOUD")


def test_corrupt_file_gives_defaults_and_keeps_the_file(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    loaded = SettingsStore(path).load()
    assert loaded == Settings()
    assert (tmp_path / "settings.json.bad").read_text() == "{not json"


def test_unknown_keys_from_a_newer_version_are_ignored(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"log_level": "WARNING", "feature_from_the_future": 1}))
    assert SettingsStore(path).load().log_level == "WARNING"


def test_crash_between_write_and_replace_leaves_old_file_intact(tmp_path):
    path = tmp_path / "settings.json"
    SettingsStore(path).save(Settings(log_level="WARNING"))
    before = path.read_bytes()
    # A real crash: the child process dies right where os.replace would run.
    code = textwrap.dedent(
        f"""
        import os
        import app.core.atomic as atomic
        from app.core.settings import Settings, SettingsStore
        atomic._replace = lambda src, dst: os._exit(17)
        SettingsStore({str(path)!r}).save(Settings(log_level="DEBUG"))
        """
    )
    rc = subprocess.run([sys.executable, "-c", code], cwd=str(_repo_root())).returncode
    assert rc == 17
    assert path.read_bytes() == before
    assert SettingsStore(path).load().log_level == "WARNING"


def test_failed_replace_cleans_up_temp_file(tmp_path, monkeypatch):
    import app.core.atomic as atomic

    path = tmp_path / "settings.json"
    SettingsStore(path).save(Settings())

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(atomic, "_replace", boom)
    with pytest.raises(OSError):
        SettingsStore(path).save(Settings(log_level="ERROR"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def _repo_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]
