import pytest

from tests.integration import test_cluster_scaling as s

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("i", range(60))
async def test_repro(kafka_cluster, redis_url, tmp_path, i):  # type: ignore[no-untyped-def]
    await s.test_workers_scaled_1_3_1_under_load_lose_nothing(kafka_cluster, redis_url, tmp_path, 3)
