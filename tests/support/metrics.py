"""What Prometheus would read of a component: its /metrics, parsed."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Every sample of one scrape: (name, labels) -> value."""


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(url: str) -> Samples:
    """GET `url` (a /metrics endpoint) once; empty while nothing answers."""
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(url, timeout=5)
    except httpx.TransportError:
        return {}
    response.raise_for_status()
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample `name{labels}` (exactly those labels); 0 when absent."""
    return samples.get((name, frozenset(labels.items())), 0.0)
