"""Collectives as α-β per network tier (Hockney's model; Thakur, Rabenseifner & Gropp 2005
for the ring's volumes). A group of n GPUs laid out with a stride (Megatron-LM's rank order:
tensor parallel innermost, then context, data, pipeline) has g of its members on each
NVLink domain; the rest of it crosses the network, each member through its own NIC. Two-level
(hierarchical) algorithms then move the domain's share over NVLink and the rest over the
NICs, the g members of a domain together.

Bus bandwidth by message size follows from α-β: a message of S bytes sees S / (α·B + S) of
the link's bandwidth B, half of it at S = α·B (a few MB on NVLink, as nccl-tests' curves
show).

Volumes per GPU, S = the bytes one GPU holds after the collective (all-gather) or before it
(reduce-scatter, all-reduce):
- all-reduce (ring): 2·(n−1)/n · S, in 2·(n−1) steps;
- all-gather, reduce-scatter: (n−1)/n · S, in n−1 steps;
- all-to-all: (n−1)/n · S, the share for other domains over the NIC;
- send/receive: S.
"""

from __future__ import annotations

from transformer_calc.planner.hardware import Cluster, Link


def members_per_domain(n: int, stride: int, domain: int) -> int:
    """How many of a group's n members share one NVLink domain, the group's members being
    ``stride`` ranks apart (contiguous blocks of ``domain`` ranks per domain)."""
    if n <= 1:
        return 1
    if stride >= domain:
        return 1
    return max(1, min(n, domain // stride))


def _phase(volume: float, steps: int, link: Link, lanes: int = 1) -> float:
    """One phase: ``volume`` bytes per GPU over ``lanes`` links of the tier, ``steps`` α's."""
    if volume <= 0 or steps <= 0:
        return 0.0
    return steps * link.latency + volume / (link.bandwidth * link.efficiency * lanes)


def _levels(cluster: Cluster, n: int, stride: int) -> tuple[int, int]:
    g = members_per_domain(n, stride, cluster.domain)
    return g, max(1, n // g)


def all_reduce(cluster: Cluster, nbytes: float, n: int, stride: int = 1) -> float:
    """Seconds for an all-reduce of ``nbytes`` on each of n GPUs."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    g, nodes = _levels(cluster, n, stride)
    # reduce-scatter and all-gather inside the domain, all-reduce of the 1/g shards across
    t = _phase(2 * (g - 1) / g * nbytes, 2 * (g - 1), cluster.nvlink)
    # (the g members of a domain each drive their own NIC: the shard 1/g of the bytes)
    t += _phase(2 * (nodes - 1) / nodes * nbytes / g, 2 * (nodes - 1), cluster.network)
    return t


def all_gather(cluster: Cluster, nbytes: float, n: int, stride: int = 1) -> float:
    """Seconds for an all-gather whose result is ``nbytes`` on each GPU (a reduce-scatter of
    ``nbytes`` costs the same)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    g, nodes = _levels(cluster, n, stride)
    t = _phase((g - 1) / g * nbytes, g - 1, cluster.nvlink)
    t += _phase((nodes - 1) / nodes * nbytes / g, nodes - 1, cluster.network)
    return t


reduce_scatter = all_gather


def all_to_all(cluster: Cluster, nbytes: float, n: int, stride: int = 1) -> float:
    """Seconds for an all-to-all of ``nbytes`` per GPU (each keeps 1/n, sends the rest)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    g, nodes = _levels(cluster, n, stride)
    inside = _phase((g - 1) / n * nbytes, 1, cluster.nvlink)
    across = _phase((n - g) / n * nbytes, 1, cluster.network) if nodes > 1 else 0.0
    return max(inside, across)


def send_recv(cluster: Cluster, nbytes: float, stride: int) -> float:
    """Seconds for one point-to-point transfer between ranks ``stride`` apart."""
    if nbytes <= 0:
        return 0.0
    link = cluster.nvlink if stride < cluster.domain else cluster.network
    return _phase(nbytes, 1, link)
