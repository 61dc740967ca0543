"""arenapool's metrics for ``prometheus_client``: a collector that takes a snapshot of
the allocator at each scrape.

::

    from prometheus_client import start_http_server
    import arenapool.prometheus

    arenapool.prometheus.register()   # on prometheus_client's default registry
    start_http_server(8000)           # /metrics now has arenapool_* metrics

The metrics are those of :func:`arenapool.stats`, with their help and type; with
``register(breakdown=True)``, also ``arenapool_holder_bytes{holder,state}``: the
process's memory by holder, as :func:`arenapool.breakdown` reads it (a scrape then
costs about a millisecond more). Importing this module needs ``prometheus_client``
(``pip install prometheus-client``).
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Union

from . import _arenapool

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "arenapool.prometheus needs prometheus_client: pip install prometheus-client"
    ) from error

__all__ = ["ArenaPoolCollector", "BreakdownCollector", "register"]


class ArenaPoolCollector(Collector):
    """A ``prometheus_client`` collector of arenapool's metrics: each scrape takes one
    snapshot of the allocator."""

    def collect(self) -> Iterator[Union[CounterMetricFamily, GaugeMetricFamily]]:
        for name, help_text, kind, series in _arenapool.metrics():
            label_names: List[str] = sorted(series[0][0]) if series else []
            family: Union[CounterMetricFamily, GaugeMetricFamily]
            if kind == "counter":
                family = CounterMetricFamily(name, help_text, labels=label_names)
            else:
                family = GaugeMetricFamily(name, help_text, labels=label_names)
            for labels, value in series:
                family.add_metric([labels[key] for key in label_names], value)
            yield family


class BreakdownCollector(Collector):
    """A ``prometheus_client`` collector of the process's memory by holder: one gauge,
    ``arenapool_holder_bytes``, with a series per holder and state, from one
    :func:`arenapool.breakdown` per scrape (holders the process has no figures for are
    left out)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from ._core._breakdown import breakdown

        b = breakdown()
        family = GaugeMetricFamily(
            "arenapool_holder_bytes",
            "The process's memory by holder, each read from its own counter (see "
            "arenapool.breakdown): resident files and shared memory, then arenapool's, "
            "glibc's, pymalloc's and Arrow's figures, and the anonymous rest.",
            labels=["holder", "state"],
        )
        rows = [
            ("files", "resident", b.files),
            ("shared", "resident", b.shared),
            ("arenapool", "live", b.arenapool_live),
            ("arenapool", "free", b.arenapool_free),
            ("arenapool", "metadata", b.arenapool_metadata),
        ]
        if b.glibc is not None:
            rows += [("glibc", "in_use", b.glibc.in_use), ("glibc", "free", b.glibc.free)]
        if b.pymalloc is not None:
            rows += [
                ("pymalloc", "in_use", b.pymalloc.in_use),
                ("pymalloc", "free", b.pymalloc.free),
                ("pymalloc", "given_back", b.pymalloc.given_back),
            ]
        rows += [(f"arrow:{pool.backend}", "allocated", pool.allocated) for pool in b.arrow]
        rows.append(("rest", "anonymous", b.rest))
        for holder, state, value in rows:
            family.add_metric([holder, state], float(value))
        yield family


def register(registry: Optional[CollectorRegistry] = None, *, breakdown: bool = False) -> ArenaPoolCollector:
    """Registers an :class:`ArenaPoolCollector` on ``registry`` (``prometheus_client``'s
    default one if ``None``), and a :class:`BreakdownCollector` too if ``breakdown``;
    returns the first."""
    target = registry if registry is not None else REGISTRY
    collector = ArenaPoolCollector()
    target.register(collector)
    if breakdown:
        target.register(BreakdownCollector())
    return collector
