"""Clusters as data: the GPU (tcalc's catalogue, transformer_calc.hardware), its streaming
multiprocessors, and the two tiers of its network, each number with its source.

A tier is what one GPU can send in one direction: the NVLink domain (the GPUs behind one
NVSwitch fabric) and the network card each GPU has to the rest of the cluster (rail-optimised
DGX-style nodes: one NIC per GPU). ``efficiency`` is the bus bandwidth NCCL reaches on large
messages over the line rate; ``latency`` is the α of the α-β model, per step of a collective.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from transformer_calc.errors import TcalcError
from transformer_calc.hardware import GPU, GPUS, GiB, get_gpu

GB = 1e9


class Link(NamedTuple):
    """One tier of the network, per GPU and per direction."""

    name: str
    bandwidth: float  # bytes/s per GPU, one direction, line rate
    efficiency: float  # bus bandwidth NCCL reaches on large messages / line rate
    latency: float  # seconds per step of a collective (α)
    source: str


class Cluster(NamedTuple):
    name: str
    gpu: GPU  # memory, dense peaks, HBM bandwidth
    arch: str  # the GPU generation the calibration is keyed by: a100, h100, b200
    sms: int  # streaming multiprocessors (the GEMM wave size)
    domain: int  # GPUs in one NVLink domain
    nvlink: Link
    network: Link
    description: str
    # calibration key of a sustained clock below the datasheet's boost (power-limited parts);
    # "" for parts that hold their rated peak
    clock: str = ""


# NVLink, one direction per GPU: the datasheets give the bidirectional total. Bus bandwidth
# reached by nccl-tests all_reduce_perf on 8 GPUs at large sizes: 230-250 GB/s (A100),
# 460-480 GB/s (H100, NVLink SHARP) (NCCL-tests reference table, docs.alayanew.com 2026,
# "NCCL-tests in practice"); the ring algorithm without SHARP reaches ~ 80 % of the line rate.
NVLINK3 = Link("NVLink 3 (NVSwitch)", 300 * GB, 0.78, 8e-6,
               "NVIDIA A100 datasheet: NVLink 600 GB/s (bidirectional)")
NVLINK4 = Link("NVLink 4 (NVSwitch)", 450 * GB, 0.80, 8e-6,
               "NVIDIA H100 SXM datasheet: NVLink 900 GB/s (bidirectional)")
NVLINK5 = Link("NVLink 5 (NVSwitch)", 900 * GB, 0.80, 8e-6,
               "NVIDIA HGX B200 datasheet: NVLink 1.8 TB/s per GPU (bidirectional)")
# NICs: line rate per GPU; NCCL reaches ~ 90 % of it across nodes (assumed from the
# ConnectX line rate less InfiniBand's 64b/66b encoding and headers).
HDR_200 = Link("InfiniBand HDR 200 Gb/s per GPU", 25 * GB, 0.90, 15e-6,
               "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 200 Gb/s HDR")
NDR_400 = Link("InfiniBand NDR 400 Gb/s per GPU", 50 * GB, 0.90, 15e-6,
               "NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 400 Gb/s NDR")
ROCE_400 = Link("RoCE 400 Gb/s per GPU", 50 * GB, 0.90, 15e-6,
                "Meta Grand Teton (torchtitan benchmarks): 400 Gb/s RDMA per GPU")
# a node with one 400 Gb/s link shared by its 8 GPUs (IBM's FSDP blog: 400 Gb/s
# inter-node with GPUDirect RDMA)
SHARED_400 = Link("400 Gb/s per node (shared by 8 GPUs)", 50 * GB / 8, 0.90, 15e-6,
                  "PyTorch/IBM FSDP blog (2023): 400 Gb/s inter-node, GPUDirect RDMA")

# The power-limited H100 of Meta's Grand Teton hosts (torchtitan's benchmarks): 96 GB of
# HBM2e at 500 W. Its peak is not published: the SXM datasheet's figures stand in, scaled by
# a sustained-clock factor fitted on measured runs (calibration key "clock.h100_500w").
H100_96GB_500W = dataclasses.replace(GPUS["H100-80GB"], name="H100-96GB-HBM2e-500W",
                                     memory_bytes=96 * GiB,
                                     source="torchtitan benchmarks: H100 96 GB HBM2e, 500 W; "
                                            "peaks: the H100 SXM datasheet's")

# SMs: NVIDIA A100 whitepaper (108), H100 whitepaper (132 on the SXM5 part; H200 the same
# die), Blackwell datasheet (148 on B200).
CLUSTERS: dict[str, Cluster] = {c.name: c for c in (
    Cluster("dgx-a100", GPUS["A100-80GB"], "a100", 108, 8, NVLINK3, HDR_200,
            "DGX A100 80GB: 8 GPUs on NVSwitch, one 200 Gb/s HDR NIC per GPU"),
    Cluster("dgx-a100-40gb", GPUS["A100-40GB"], "a100", 108, 8, NVLINK3, HDR_200,
            "DGX A100 40GB: 8 GPUs on NVSwitch, one 200 Gb/s HDR NIC per GPU"),
    Cluster("dgx-h100", GPUS["H100-80GB"], "h100", 132, 8, NVLINK4, NDR_400,
            "DGX H100: 8 GPUs on NVSwitch, one 400 Gb/s NDR NIC per GPU"),
    Cluster("hgx-h200", GPUS["H200-141GB"], "h100", 132, 8, NVLINK4, NDR_400,
            "HGX H200: 8 GPUs on NVSwitch, one 400 Gb/s NIC per GPU"),
    Cluster("dgx-b200", GPUS["B200-180GB"], "b200", 148, 8, NVLINK5, NDR_400,
            "DGX B200: 8 GPUs on NVSwitch, one 400 Gb/s NIC per GPU"),
    Cluster("grand-teton-h100", H100_96GB_500W, "h100", 132, 8, NVLINK4, ROCE_400,
            "Meta Grand Teton: 8 H100 96GB HBM2e at 500 W on NVSwitch, 400 Gb/s RDMA per GPU",
            clock="clock.h100_500w"),
    Cluster("a100-shared-400g", GPUS["A100-80GB"], "a100", 108, 8, NVLINK3, SHARED_400,
            "A100 80GB nodes of 8 on NVSwitch, 400 Gb/s per node (IBM's FSDP runs)"),
    Cluster("h100-shared-400g", GPUS["H100-80GB"], "h100", 132, 8, NVLINK4, SHARED_400,
            "H100 nodes of 8 on NVSwitch, 400 Gb/s per node (IBM's FSDP runs)"),
)}

# the cluster a bare GPU name plans on
DEFAULT_CLUSTER = {"A100-80GB": "dgx-a100", "A100-40GB": "dgx-a100-40gb",
                   "H100-80GB": "dgx-h100", "H200-141GB": "hgx-h200",
                   "B200-180GB": "dgx-b200"}


def cluster_for(gpu: str | None = None, cluster: str | None = None) -> Cluster:
    """The cluster a plan runs on: a preset by name, or the default one for a GPU."""
    if cluster:
        if cluster not in CLUSTERS:
            raise TcalcError(f"--cluster: unknown cluster {cluster!r}; known: "
                             + ", ".join(CLUSTERS))
        found = CLUSTERS[cluster]
        if gpu and get_gpu(gpu).name != found.gpu.name:
            raise TcalcError(f"--cluster {cluster} has {found.gpu.name} GPUs, not {gpu}")
        return found
    if not gpu:
        raise TcalcError("--gpu: expected a GPU (see `tcalc gpus`) or --cluster")
    name = get_gpu(gpu).name
    if name not in DEFAULT_CLUSTER:
        raise TcalcError(f"--gpu {gpu}: the planner models {', '.join(DEFAULT_CLUSTER)} "
                         "(their SMs and network tiers are known); others are not modelled")
    return CLUSTERS[DEFAULT_CLUSTER[name]]
