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
