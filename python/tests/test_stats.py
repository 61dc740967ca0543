"""arenapool.stats() and the prometheus_client collector: the metrics' names, and the
totals moving as phases end."""

import arenapool

MIB = 1 << 20


def test_resident_by_kind_adds_up_to_the_allocator_s() -> None:
    stats = arenapool.stats()
    kinds = [key for key in stats if key.startswith('arenapool_arena_resident_bytes{kind="')]
    assert len(kinds) == 6, kinds
    assert stats["arenapool_jemalloc_resident_bytes"] > 0
    assert sum(stats[key] for key in kinds) == stats["arenapool_jemalloc_resident_bytes"]


def test_a_phase_counts_as_ended_with_what_it_gave_back() -> None:
    ended = 'arenapool_work_ended_total{name="",work="phase"}'
    returned = 'arenapool_work_returned_bytes_total{name="",work="phase"}'
    before = arenapool.stats()
    with arenapool.phase():
        blocks = [bytearray(MIB) for _ in range(64)]
        del blocks
    after = arenapool.stats()
    assert after[ended] == before[ended] + 1
    assert after[returned] - before[returned] >= 48 * MIB
    assert after["arenapool_returned_bytes_total"] - before["arenapool_returned_bytes_total"] >= 48 * MIB
    assert after['arenapool_arena_resident_bytes{kind="phase"}'] >= 0


def test_the_collector_serves_the_same_metrics() -> None:
    import pytest

    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    import arenapool.prometheus

    registry = prometheus_client.CollectorRegistry()
    arenapool.prometheus.register(registry)
    with arenapool.phase():
        block = bytearray(8 * MIB)
        del block
    text = prometheus_client.generate_latest(registry).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert families["arenapool_jemalloc_resident_bytes"].type == "gauge"
    assert families["arenapool_returned_bytes"].type == "counter"  # the parser drops _total
    names = {sample.name for family in families.values() for sample in family.samples}
    stats = arenapool.stats()
    assert {key.split("{")[0] for key in stats} <= names
    work = families["arenapool_work_ended"]
    phases = [s for s in work.samples if s.labels == {"name": "", "work": "phase"} and s.name.endswith("_total")]
    assert phases and phases[0].value >= 1


def test_the_breakdown_collector_serves_each_holder() -> None:
    import pytest

    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    import arenapool.prometheus

    registry = prometheus_client.CollectorRegistry()
    arenapool.prometheus.register(registry, breakdown=True)
    text = prometheus_client.generate_latest(registry).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    holders = {(s.labels["holder"], s.labels["state"]): s.value for s in families["arenapool_holder_bytes"].samples}
    b = arenapool.breakdown()
    assert {("arenapool", "metadata"), ("rest", "anonymous"), ("files", "resident")} <= set(holders)
    # glibc's and pymalloc's gauges where the breakdown has their figures only.
    assert (("glibc", "in_use") in holders) == (b.glibc is not None), holders
    assert (("pymalloc", "in_use") in holders) == (b.pymalloc is not None), holders
    # Read a moment apart: the same within a few MiB.
    if b.pymalloc is not None:
        assert abs(holders[("pymalloc", "in_use")] - b.pymalloc.in_use) <= 4 * MIB
    if b.glibc is not None:
        assert abs(holders[("glibc", "in_use")] - b.glibc.in_use) <= 4 * MIB
    assert abs(holders[("files", "resident")] - b.files) <= 4 * MIB
    # Without breakdown=True, no such gauge.
    plain = prometheus_client.CollectorRegistry()
    arenapool.prometheus.register(plain)
    assert "arenapool_holder_bytes" not in prometheus_client.generate_latest(plain).decode()
