from app.core.paths import app_paths
from app.core.services import Services
from app.core.settings import Settings


def test_services_open_and_close_cleanly():
    paths = app_paths().ensure()
    services = Services.open(paths, Settings(parallel_downloads=3), env={})
    try:
        assert services.host.state.status == "idle"
        assert services.library.list() == []
        assert services.chats.list_conversations() == []
        assert services.downloads.items() == []
        assert (paths.data / "library.db").exists() and (paths.data / "chats.sqlite3").exists()
    finally:
        services.close()
    assert not services.host._thread.is_alive()


def test_the_speculative_setting_and_draft_picks_reach_the_resolver():
    from app.core.library.store import LocalModel

    paths = app_paths().ensure()
    services = Services.open(paths, Settings(speculative="off", draft_models={"m1": "d1"}), env={})
    try:
        assert services.resolver.speculative == "off" and services.resolver.drafts is not None
        model = LocalModel(
            "m1", "m", "gguf", None, 1, paths.models / "m.gguf", (), None, None, "import", 0.0, None, "ready"
        )
        assert services.resolver.draft_for is not None and services.resolver.draft_for(model) == "d1"
        services.apply_settings(Settings(speculative="on"))
        assert services.resolver.speculative == "auto"  # on: drafting (still only while faster) on any device
        assert services.resolver.draft_for(model) is None  # the pick went with the settings
        services.apply_settings(Settings())
        assert services.resolver.speculative is None  # automatic: as each load's plan says
    finally:
        services.close()
