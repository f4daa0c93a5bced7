"""The scripted server as a fixture: `@pytest.mark.parametrize("server", [mode], indirect=True)`."""
from __future__ import annotations

import pytest

from tests.integration.harness.client.scripted_server import ScriptedServer


@pytest.fixture
def server(request):
    s = ScriptedServer(request.param)
    yield s
    s.close()
