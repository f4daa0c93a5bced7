"""Fixtures come from tests/support.py (one support module); integration tests are marked in
tests/integration/conftest.py."""
pytest_plugins = ("tests.support",)
