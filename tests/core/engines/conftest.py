"""Engine fixtures live in tests/core/engines/fixtures.py, registered as a plugin in tests/conftest.py."""
