from pathlib import Path

import pytest
from sweep_fixtures import demo_sweep


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return demo_sweep(tmp_path / "sweep")
