"""Every test in this folder starts real processes (Locust, endpoints, Triton, chronyd, Chromium)."""
import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
