"""arenapool's metrics for ``prometheus_client``: a collector that takes a snapshot of
the allocator at each scrape.

::

    from prometheus_client import start_http_server
    import arenapool.prometheus

    arenapool.prometheus.register()   # on prometheus_client's default registry
    start_http_server(8000)           # /metrics now has arenapool_* metrics

The metrics are those of :func:`arenapool.stats`, with their help and type. Importing
this module needs ``prometheus_client`` (``pip install prometheus-client``).
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

__all__ = ["ArenaPoolCollector", "register"]


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


def register(registry: Optional[CollectorRegistry] = None) -> ArenaPoolCollector:
    """Registers an :class:`ArenaPoolCollector` on ``registry`` (``prometheus_client``'s
    default one if ``None``) and returns it."""
    collector = ArenaPoolCollector()
    (registry if registry is not None else REGISTRY).register(collector)
    return collector
