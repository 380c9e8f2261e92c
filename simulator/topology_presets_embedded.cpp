// The fixed presets' YAML, compiled in so the binary works without the
// resources/ folder. Each text is byte-identical to
// resources/topologies/<name>.yaml (a test checks it): edit the file, then
// paste it here.
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::sim {

const std::vector<std::pair<std::string_view, std::string_view>>& embeddedPresets() {
  static const std::vector<std::pair<std::string_view, std::string_view>> presets{
      {"h200x2-nv18", R"yaml(# h200x2-nv18: the measured machine. Two NVIDIA H200 SXM joined directly by
# 18 bonded NVLink links ("NV18" in `nvidia-smi topo -m`), each 26.562 GB/s
# per direction as `nvidia-smi nvlink -s` reports: 478.1 GB/s per direction
# between the two GPUs. Device facts from `nvidia-smi`: 143771 MiB, 132 SMs.
#
# Format: docs/topology-format.md. Units: bandwidth in GB/s (1e9 bytes/s) per
# direction, latency in ns, FLOP/s dense peak, memory as named by the key.
name: h200x2-nv18
description: "2x H200 SXM joined by NV18 (18 x 26.562 GB/s per direction), the measured machine"
hosts:
  - name: host0
# Fields every device shares; a device entry may override any of them.
device_defaults:
  model: H200
  host: host0
  bf16_flops: 989e12    # dense BF16 tensor-core peak
  fp32_flops: 67e12     # FP32 (non-tensor) peak
  hbm_gbps: 4800        # HBM3e
  memory_mib: 143771    # as nvidia-smi reports it
  sm_count: 132
devices:
  - name: gpu0
  - name: gpu1
switches:
  # The CPU root complex: host memory copies go through it; GPU-to-GPU
  # traffic never does, the direct NVLink is shorter.
  - {name: cpu0, kind: cpu, host: host0}
links:
  # lanes x lane_gbps = 18 x 26.562 = 478.116 GB/s in each direction.
  - {a: gpu0, b: gpu1, kind: nvlink, lanes: 18, lane_gbps: 26.562, latency_ns: 500}
  # PCIe Gen5 x16: about 55 GB/s per direction in practice.
  - {a: gpu0, b: cpu0, kind: pcie, gbps: 55, latency_ns: 500}
  - {a: gpu1, b: cpu0, kind: pcie, gbps: 55, latency_ns: 500}
)yaml"},
      {"dgx-h100", R"yaml(# dgx-h100: an NVIDIA DGX H100 (or HGX H100 8-GPU) box. 8 H100 SXM5 80GB
# (HBM3 3.35 TB/s, 81559 MiB as nvidia-smi reports), 132 SMs.
#
# NVSwitch: the real box has 4 NVSwitch chips and each GPU spreads its 18
# NVLink4 links over them (5+4+4+5). NCCL stripes every transfer over all 18
# links, so a flow model that routed one transfer through one chip would see a
# quarter of the bandwidth. We therefore model the 4 chips as ONE logical
# nvswitch node and each GPU's 18 links as one bonded link of 18 x 25 GB/s =
# 450 GB/s per direction.
#
# PCIe and network: each GPU sits behind its own PCIe Gen5 switch together with
# one 400 Gb/s ConnectX-7 NIC (its rail); the switches hang off two CPU
# sockets. The NICs lead nowhere in this single-box preset; the generated
# "<N>xdgx-h100" clusters connect them to an InfiniBand fat tree.
#
# Format: docs/topology-format.md. Units: bandwidth in GB/s (1e9 bytes/s) per
# direction, latency in ns, FLOP/s dense peak, memory as named by the key.
name: dgx-h100
description: "DGX H100: 8x H100 SXM 80GB, NVSwitch (18 NVLink4 = 450 GB/s per direction per GPU), 8x 400 Gb/s NICs"
hosts:
  - name: host0
device_defaults:
  model: H100
  host: host0
  bf16_flops: 989e12    # dense BF16 tensor-core peak (SXM5)
  fp32_flops: 67e12     # FP32 (non-tensor) peak
  hbm_gbps: 3350
  memory_mib: 81559
  sm_count: 132
devices:
  - name: gpu0
  - name: gpu1
  - name: gpu2
  - name: gpu3
  - name: gpu4
  - name: gpu5
  - name: gpu6
  - name: gpu7
switches:
  - {name: nvswitch, kind: nvswitch, host: host0}   # the 4 chips as one node
  - {name: cpu0, kind: cpu, host: host0}
  - {name: cpu1, kind: cpu, host: host0}
  - {name: pcie0, kind: pcie_switch, host: host0}
  - {name: pcie1, kind: pcie_switch, host: host0}
  - {name: pcie2, kind: pcie_switch, host: host0}
  - {name: pcie3, kind: pcie_switch, host: host0}
  - {name: pcie4, kind: pcie_switch, host: host0}
  - {name: pcie5, kind: pcie_switch, host: host0}
  - {name: pcie6, kind: pcie_switch, host: host0}
  - {name: pcie7, kind: pcie_switch, host: host0}
  - {name: nic0, kind: nic, host: host0}   # rail 0, 400 Gb/s
  - {name: nic1, kind: nic, host: host0}   # rail 1, 400 Gb/s
  - {name: nic2, kind: nic, host: host0}   # rail 2, 400 Gb/s
  - {name: nic3, kind: nic, host: host0}   # rail 3, 400 Gb/s
  - {name: nic4, kind: nic, host: host0}   # rail 4, 400 Gb/s
  - {name: nic5, kind: nic, host: host0}   # rail 5, 400 Gb/s
  - {name: nic6, kind: nic, host: host0}   # rail 6, 400 Gb/s
  - {name: nic7, kind: nic, host: host0}   # rail 7, 400 Gb/s
links:
  # NVLink4: 18 links x 25 GB/s = 450 GB/s per direction per GPU.
  - {a: gpu0, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu1, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu2, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu3, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu4, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu5, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu6, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu7, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  # PCIe Gen5 x16 (about 55 GB/s per direction): GPU and NIC behind one switch.
  - {a: gpu0, b: pcie0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu1, b: pcie1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu2, b: pcie2, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu3, b: pcie3, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu4, b: pcie4, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu5, b: pcie5, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu6, b: pcie6, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu7, b: pcie7, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic0, b: pcie0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic1, b: pcie1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic2, b: pcie2, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic3, b: pcie3, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic4, b: pcie4, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic5, b: pcie5, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic6, b: pcie6, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic7, b: pcie7, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie0, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie1, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie2, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie3, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie4, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie5, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie6, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie7, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  # The socket interconnect (UPI), about 60 GB/s per direction.
  - {a: cpu0, b: cpu1, kind: internal, gbps: 60, latency_ns: 300}
)yaml"},
      {"dgx-h200", R"yaml(# dgx-h200: an NVIDIA DGX H200 (or HGX H200 8-GPU) box. 8 H200 SXM
# (HBM3e 4.8 TB/s, 143771 MiB as nvidia-smi reports), 132 SMs.
#
# NVSwitch: the real box has 4 NVSwitch chips and each GPU spreads its 18
# NVLink4 links over them (5+4+4+5). NCCL stripes every transfer over all 18
# links, so a flow model that routed one transfer through one chip would see a
# quarter of the bandwidth. We therefore model the 4 chips as ONE logical
# nvswitch node and each GPU's 18 links as one bonded link of 18 x 25 GB/s =
# 450 GB/s per direction.
#
# PCIe and network: each GPU sits behind its own PCIe Gen5 switch together with
# one 400 Gb/s ConnectX-7 NIC (its rail); the switches hang off two CPU
# sockets. The NICs lead nowhere in this single-box preset; the generated
# "<N>xdgx-h100" clusters connect them to an InfiniBand fat tree.
#
# Format: docs/topology-format.md. Units: bandwidth in GB/s (1e9 bytes/s) per
# direction, latency in ns, FLOP/s dense peak, memory as named by the key.
name: dgx-h200
description: "DGX H200: 8x H200 SXM 141GB, NVSwitch (18 NVLink4 = 450 GB/s per direction per GPU), 8x 400 Gb/s NICs"
hosts:
  - name: host0
device_defaults:
  model: H200
  host: host0
  bf16_flops: 989e12    # dense BF16 tensor-core peak (SXM5)
  fp32_flops: 67e12     # FP32 (non-tensor) peak
  hbm_gbps: 4800
  memory_mib: 143771
  sm_count: 132
devices:
  - name: gpu0
  - name: gpu1
  - name: gpu2
  - name: gpu3
  - name: gpu4
  - name: gpu5
  - name: gpu6
  - name: gpu7
switches:
  - {name: nvswitch, kind: nvswitch, host: host0}   # the 4 chips as one node
  - {name: cpu0, kind: cpu, host: host0}
  - {name: cpu1, kind: cpu, host: host0}
  - {name: pcie0, kind: pcie_switch, host: host0}
  - {name: pcie1, kind: pcie_switch, host: host0}
  - {name: pcie2, kind: pcie_switch, host: host0}
  - {name: pcie3, kind: pcie_switch, host: host0}
  - {name: pcie4, kind: pcie_switch, host: host0}
  - {name: pcie5, kind: pcie_switch, host: host0}
  - {name: pcie6, kind: pcie_switch, host: host0}
  - {name: pcie7, kind: pcie_switch, host: host0}
  - {name: nic0, kind: nic, host: host0}   # rail 0, 400 Gb/s
  - {name: nic1, kind: nic, host: host0}   # rail 1, 400 Gb/s
  - {name: nic2, kind: nic, host: host0}   # rail 2, 400 Gb/s
  - {name: nic3, kind: nic, host: host0}   # rail 3, 400 Gb/s
  - {name: nic4, kind: nic, host: host0}   # rail 4, 400 Gb/s
  - {name: nic5, kind: nic, host: host0}   # rail 5, 400 Gb/s
  - {name: nic6, kind: nic, host: host0}   # rail 6, 400 Gb/s
  - {name: nic7, kind: nic, host: host0}   # rail 7, 400 Gb/s
links:
  # NVLink4: 18 links x 25 GB/s = 450 GB/s per direction per GPU.
  - {a: gpu0, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu1, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu2, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu3, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu4, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu5, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu6, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  - {a: gpu7, b: nvswitch, kind: nvlink, lanes: 18, lane_gbps: 25, latency_ns: 250}
  # PCIe Gen5 x16 (about 55 GB/s per direction): GPU and NIC behind one switch.
  - {a: gpu0, b: pcie0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu1, b: pcie1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu2, b: pcie2, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu3, b: pcie3, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu4, b: pcie4, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu5, b: pcie5, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu6, b: pcie6, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: gpu7, b: pcie7, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic0, b: pcie0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic1, b: pcie1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic2, b: pcie2, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic3, b: pcie3, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic4, b: pcie4, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic5, b: pcie5, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic6, b: pcie6, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: nic7, b: pcie7, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie0, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie1, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie2, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie3, b: cpu0, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie4, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie5, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie6, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  - {a: pcie7, b: cpu1, kind: pcie, gbps: 55, latency_ns: 250}
  # The socket interconnect (UPI), about 60 GB/s per direction.
  - {a: cpu0, b: cpu1, kind: internal, gbps: 60, latency_ns: 300}
)yaml"},
      {"pcie-4gpu", R"yaml(# pcie-4gpu: a workstation-class box with 4 A100 80GB PCIe cards and no
# NVLink bridges. Every GPU has a PCIe Gen4 x16 slot (about 25 GB/s per
# direction in practice, 32 GB/s raw) into one PCIe switch; the switch reaches
# the CPU through a single Gen4 x16 uplink to the host bridge, so host copies
# of all four GPUs share 25 GB/s. GPU-to-GPU traffic (P2P) turns around in
# the switch and does not cross the host bridge.
#
# Format: docs/topology-format.md. Units: bandwidth in GB/s (1e9 bytes/s) per
# direction, latency in ns, FLOP/s dense peak, memory as named by the key.
name: pcie-4gpu
description: "4x A100 80GB PCIe Gen4 x16 (~25 GB/s per direction) behind one PCIe switch and a host bridge"
hosts:
  - name: host0
device_defaults:
  model: A100-PCIE-80GB
  host: host0
  bf16_flops: 312e12    # dense BF16 tensor-core peak
  fp32_flops: 19.5e12   # FP32 (non-tensor) peak
  hbm_gbps: 1935        # HBM2e
  memory_mib: 81920
  sm_count: 108
devices:
  - name: gpu0
  - name: gpu1
  - name: gpu2
  - name: gpu3
switches:
  - {name: pcie0, kind: pcie_switch, host: host0}
  - {name: hostbridge0, kind: host_bridge, host: host0}
  - {name: cpu0, kind: cpu, host: host0}
links:
  - {a: gpu0, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu1, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu2, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu3, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  # The switch's uplink: one Gen4 x16 shared by the four GPUs.
  - {a: pcie0, b: hostbridge0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  # Root complex to memory controllers, inside the CPU: not a bottleneck.
  - {a: hostbridge0, b: cpu0, kind: internal, gbps: 200, latency_ns: 100}
)yaml"},
      {"hgx-a100", R"yaml(# hgx-a100: an HGX A100 8-GPU board (as in a DGX A100). 8 A100 SXM4 80GB
# (HBM2e 2.04 TB/s, 81920 MiB), 108 SMs, dense BF16 312 TFLOP/s.
#
# NVSwitch: six NVSwitch chips; each GPU has 12 NVLink3 links of 25 GB/s per
# direction, 300 GB/s in all. As in dgx-h100 the chips are ONE logical
# nvswitch node and each GPU's links one bonded link, because NCCL stripes
# every transfer over all of them.
#
# PCIe: Gen4 x16 (about 25 GB/s per direction); two GPUs share one PCIe
# switch, two switches per CPU socket.
#
# Format: docs/topology-format.md. Units: bandwidth in GB/s (1e9 bytes/s) per
# direction, latency in ns, FLOP/s dense peak, memory as named by the key.
name: hgx-a100
description: "HGX A100: 8x A100 SXM4 80GB, NVSwitch (12 NVLink3 = 300 GB/s per direction per GPU)"
hosts:
  - name: host0
device_defaults:
  model: A100-80GB
  host: host0
  bf16_flops: 312e12    # dense BF16 tensor-core peak
  fp32_flops: 19.5e12   # FP32 (non-tensor) peak
  hbm_gbps: 2039        # HBM2e
  memory_mib: 81920
  sm_count: 108
devices:
  - name: gpu0
  - name: gpu1
  - name: gpu2
  - name: gpu3
  - name: gpu4
  - name: gpu5
  - name: gpu6
  - name: gpu7
switches:
  - {name: nvswitch, kind: nvswitch, host: host0}   # the 6 chips as one node
  - {name: cpu0, kind: cpu, host: host0}
  - {name: cpu1, kind: cpu, host: host0}
  - {name: pcie0, kind: pcie_switch, host: host0}
  - {name: pcie1, kind: pcie_switch, host: host0}
  - {name: pcie2, kind: pcie_switch, host: host0}
  - {name: pcie3, kind: pcie_switch, host: host0}
links:
  # NVLink3: 12 links x 25 GB/s = 300 GB/s per direction per GPU.
  - {a: gpu0, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu1, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu2, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu3, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu4, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu5, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu6, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  - {a: gpu7, b: nvswitch, kind: nvlink, lanes: 12, lane_gbps: 25, latency_ns: 250}
  # PCIe Gen4 x16: two GPUs per switch, two switches per socket.
  - {a: gpu0, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu1, b: pcie0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu2, b: pcie1, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu3, b: pcie1, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu4, b: pcie2, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu5, b: pcie2, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu6, b: pcie3, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: gpu7, b: pcie3, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: pcie0, b: cpu0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: pcie1, b: cpu0, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: pcie2, b: cpu1, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  - {a: pcie3, b: cpu1, kind: pcie, gbps: 25, lanes: 16, latency_ns: 500}
  # The socket interconnect (AMD Infinity Fabric / xGMI), about 50 GB/s per direction.
  - {a: cpu0, b: cpu1, kind: internal, gbps: 50, latency_ns: 300}
)yaml"},
  };
  return presets;
}

}  // namespace tandem::sim
