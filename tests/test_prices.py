"""Prices per chip, not per device: a real run on 2 devices declared Ironwood (2 devices per chip,
so 1 chip), its cost per 1M tokens and per step against numbers worked out by hand."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, report_doc, tpu_perf_cli
from tpu_perf.analyzers import compare

pytestmark = pytest.mark.slow
PRICE = 4.0
"""Dollars per chip-hour."""
TOKENS = 4096


@pytest.fixture(scope="module")
def ironwood(tmp_path_factory: pytest.TempPathFactory) -> dict:
    store = tmp_path_factory.mktemp("prices") / "runs"
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    tpu_perf_cli("record", "--store", str(store), "--name", "iw", "-q", "--chip", "ironwood", "--tokens-per-step", str(TOKENS), str(ROOT / "tests" / "scripts" / "jax_two_devices.py"), env=env, check=True)
    return report_doc("iw", store)


def test_cost_divides_by_chips_not_devices(ironwood: dict) -> None:
    doc = ironwood
    assert (doc["flops"]["devices"], doc["flops"]["devices_per_chip"]) == (2, 2)  # 2 devices = 1 Ironwood chip
    assert compare.devices(doc) == 2 and compare.chips(doc) == 1
    tokens_per_s = TOKENS / doc["steps"]["step_s"]
    assert doc["steps"]["tokens_per_s"] == pytest.approx(tokens_per_s)
    # by hand: $4 per chip-hour x 1 chip x the hours 1M tokens take
    assert compare.cost_per_million_tokens(doc, PRICE) == pytest.approx(4.0 * 1 * (1e6 / tokens_per_s) / 3600, rel=1e-12)
    assert compare.cost_per_step(doc, PRICE) == pytest.approx(4.0 * 1 * doc["steps"]["all_in_s"] / 3600, rel=1e-12)
    rows = compare.kpi_rows({"iw": doc}, "iw", PRICE).set_index("kpi")
    assert rows.loc["Cost / 1M tokens", "value"] == pytest.approx(4.0 * 1e6 / tokens_per_s / 3600, rel=1e-12)
    assert rows.loc["Cost / step", "value"] == pytest.approx(4.0 * doc["steps"]["all_in_s"] / 3600, rel=1e-12)
