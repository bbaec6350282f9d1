"""One GPU node pool: an EKS managed node group confined to ONE availability zone.

A pool per zone (never one multi-zone group) is what makes "N+1 by zone" hold: the plan places
replicas per zone, and each zone's nodes come from its own group, so losing a zone costs exactly
the replicas the plan expects to lose.

Each node: the EKS NVIDIA AL2023 AMI, IMDSv2 only, an encrypted gp3 root volume, its instance-store
NVMe disks striped (RAID0) at /mnt/models as the model cache, optional EFA interfaces, and
optional targeting of an On-Demand Capacity Reservation or a Capacity Block for ML.
"""
from __future__ import annotations

import base64
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from conventions import (
    GPU_ROLE_LABEL, GPU_TAINT, LABEL_POOL, LABEL_ZONE, MODEL_CACHE_PATH, TAG_GPUS_PER_NODE, TAG_PURCHASE_APPROVED,
)
from deployment.drain import CRITICAL_PODS_S
from deployment.node_pools import NodePoolSpec
from settings.schema import GpuPoolSettings
from sizing.planner import Pool

from .cluster import Cluster, hardened_launch_template
from .network import Network
from .options import after
from .pods import APP_GID, APP_UID

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
GPU_ROOT_VOLUME_GIB = 200                   # container images (vLLM is ~20 GB unpacked); weights live on NVMe
# The one GPU taint (conventions.GPU_TAINT) in EKS's spelling: its API names the effect NO_SCHEDULE.
EKS_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
NODE_GROUP_GPU_TAINT = aws.eks.NodeGroupTaintArgs(key=GPU_TAINT["key"], value=GPU_TAINT["value"],
                                                  effect=EKS_TAINT_EFFECTS[GPU_TAINT["effect"]])
MIME_BOUNDARY = "==LLMSERVING=="

# nodeadm reads the NodeConfig part; EKS merges in the cluster details for a managed node group.
# A graceful shutdown gives vLLM time to drain in-flight requests when a node is stopped
# (node repair, a Capacity Block ending): the kubelet's grace covers a serving pod's whole
# grace period (components/drain.py), so a node stop drains like an eviction.
def node_config(shutdown_grace_s: int, efa: bool = False) -> str:
    return textwrap.dedent(f"""\
        apiVersion: node.eks.aws/v1alpha1
        kind: NodeConfig
        spec:
          kubelet:
            config:
              shutdownGracePeriod: {shutdown_grace_s}s
              shutdownGracePeriodCriticalPods: {CRITICAL_PODS_S}s
        """) + (EFA_CONTAINERD_LIMITS if efa else "")


# Locked memory for libfabric's EFA provider, which pins the host buffers it registers with the
# device, in containers that keep every capability dropped (no IPC_LOCK). The AL2023 AMI raises no
# container's memlock: its containerd base runtime spec sets RLIMIT_NOFILE only
# (awslabs/amazon-eks-ami nodeadm/internal/containerd/base-runtime-spec.json L159-L165), where the
# AL2 AMI had set memlock unlimited for Docker (CHANGELOG, "Update ulimit for memlock to unlimited";
# Bottlerocket raises it when an EFA device is attached: bottlerocket-core-kit PR #141). nodeadm's
# `containerd.baseRuntimeSpec` is its documented override (nodeadm/doc/examples.md, "Modifying
# container RLIMITs"); it merges with mergo's override, so the list replaces the default one and
# restates its RLIMIT_NOFILE. nodeadm merges through JSON into float64 (nodeadm/internal/util/merge.go),
# where RLIM_INFINITY (2^64 - 1) would round up past uint64: 2^62 bytes is exact and as good as unlimited.
EFA_MEMLOCK_BYTES = 2 ** 62
AMI_NOFILE_SOFT, AMI_NOFILE_HARD = 65536, 1048576       # base-runtime-spec.json's own values
EFA_CONTAINERD_LIMITS = textwrap.indent(textwrap.dedent(f"""\
    containerd:
      baseRuntimeSpec:
        process:
          rlimits:
            - {{type: RLIMIT_NOFILE, soft: {AMI_NOFILE_SOFT}, hard: {AMI_NOFILE_HARD}}}
            - {{type: RLIMIT_MEMLOCK, soft: {EFA_MEMLOCK_BYTES}, hard: {EFA_MEMLOCK_BYTES}}}
    """), "  ")


# Runs before kubelet starts (nodeadm-run waits for cloud-final), so /mnt/models exists before
# any pod is scheduled. Instance store survives a reboot but not a stop: the fstab entry
# (by label, nofail) remounts after a reboot; a new instance builds a fresh array.
MODEL_CACHE_SCRIPT = textwrap.dedent(f"""\
    #!/usr/bin/env bash
    set -euo pipefail
    MOUNT={MODEL_CACHE_PATH}
    # vLLM runs as uid {APP_UID}: the cache is its own, whichever way this script ends.
    trap 'chown {APP_UID}:{APP_GID} "$MOUNT" && chmod 0750 "$MOUNT"' EXIT
    mkdir -p "$MOUNT"
    mountpoint -q "$MOUNT" && exit 0
    mapfile -t DISKS < <(for d in /dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_*; do
      [ -e "$d" ] && readlink -f "$d"; done | sort -u)
    if [ "${{#DISKS[@]}}" -eq 0 ]; then
      echo "llm-serving: no instance-store NVMe; the model cache stays on the root volume"; exit 0
    elif [ "${{#DISKS[@]}}" -eq 1 ]; then
      DEV="${{DISKS[0]}}"
    else
      DEV=/dev/md/models
      [ -e "$DEV" ] || mdadm --assemble --scan || true
      [ -e "$DEV" ] || mdadm --create "$DEV" --level=0 --raid-devices="${{#DISKS[@]}}" \\
        --name=models --force --run "${{DISKS[@]}}"
    fi
    blkid "$DEV" >/dev/null 2>&1 || mkfs.xfs -f -L models "$DEV"
    mount -o noatime "$DEV" "$MOUNT"
    grep -q " $MOUNT " /etc/fstab || echo "LABEL=models $MOUNT xfs noatime,nofail 0 2" >> /etc/fstab
    """)


def mig_script(profile: str, instances_per_gpu: int) -> str:
    """Every GPU of the node in MIG mode, split into `instances_per_gpu` instances of `profile`
    (a GPU instance and its compute instance each: `-cgi ... -C`), before kubelet starts, so the
    device plugin advertises `nvidia.com/mig-<profile>` from its first listing (NVIDIA MIG user guide,
    "Getting Started with MIG": "Enable MIG Mode", "Creating GPU Instances"). The profile comes from
    sizing.mig's table, never from free text."""
    profiles = ",".join([profile] * instances_per_gpu)
    return textwrap.dedent(f"""\
        #!/usr/bin/env bash
        set -euo pipefail
        for gpu in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
          nvidia-smi -i "$gpu" -mig 1
          nvidia-smi mig -i "$gpu" -dci || true
          nvidia-smi mig -i "$gpu" -dgi || true
          nvidia-smi mig -i "$gpu" -cgi '{profiles}' -C
        done
        """)


def user_data(shutdown_grace_s: int, mig=None, efa: bool = False) -> str:
    """The launch template's user data: AL2023 MIME multipart (NodeConfig + the cache script, and
    the MIG geometry when the plan slices the GPUs: `mig` a sizing.mig.MigProfile), base64. On EFA
    nodes the NodeConfig also raises the containers' locked-memory limit (EFA_CONTAINERD_LIMITS)."""
    parts = [("application/node.eks.aws", node_config(shutdown_grace_s, efa)), ('text/x-shellscript; charset="us-ascii"', MODEL_CACHE_SCRIPT)]
    if mig is not None:
        parts.append(('text/x-shellscript; charset="us-ascii"', mig_script(mig.name, mig.instances_per_gpu)))
    body = "MIME-Version: 1.0\n" f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n\n'
    for content_type, text in parts:
        body += f"--{MIME_BOUNDARY}\nContent-Type: {content_type}\n\n{text}\n"
    body += f"--{MIME_BOUNDARY}--\n"
    return base64.b64encode(body.encode()).decode()


# How EKS replaces GPU nodes on an update (AMI, launch template, Kubernetes version). Its
# DEFAULT strategy launches the new instances before terminating the old ones: a surge p5 that a
# capacity block or reservation sized to the pool cannot supply, so the update stalls. MINIMAL
# (EKS API NodegroupUpdateConfig.updateStrategy) drains and terminates first, then launches; one
# node at a time (maxUnavailable 1). Serving rides on the other zone meanwhile: N+1 by zone is
# sized for exactly that. EKS has no maxSurge knob; the strategy is the mechanism.
GPU_UPDATE_STRATEGY = "MINIMAL"
GPU_MAX_UNAVAILABLE = 1


def gpu_update_config() -> aws.eks.NodeGroupUpdateConfigArgs:
    return aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=GPU_MAX_UNAVAILABLE, update_strategy=GPU_UPDATE_STRATEGY)


@dataclass(frozen=True)
class GpuNodePoolArgs:
    tags: Mapping[str, str]
    spec: NodePoolSpec               # deployment.node_pools.node_pool_specs(plan, settings)
    cluster: Cluster
    network: Network
    efa_security_group_id: pulumi.Input[str] | None = None   # components/efa.py: all traffic within itself


# `opts.depends_on` names the node groups updated before this one: pools update one after another,
# so a launch template change never drains two zones at once (MINIMAL takes the node down before
# replacing it).


class GpuNodePool(pulumi.ComponentResource):
    """A managed node group of `pool.nodes` GPU nodes in the one zone `pool.zone`.

    Built in named steps: capacity (reservation or block), EFA interfaces, launch template, node group."""

    launch_template: aws.ec2.LaunchTemplate
    node_group: aws.eks.NodeGroup
    capacity_block: aws.ec2.CapacityBlockReservation | None

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:gpu:GpuNodePool", name, None, opts)
        pool = args.spec.pool
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, TAG_GPUS_PER_NODE: str(args.spec.gpus_per_node)}
        self.zone, self.label = pool.zone, pool.label
        self.efa_interfaces = 0           # EFA devices per node (what the serving pods request)

        reservation_id, uses_block = self._capacity(name, args.spec.settings, tags, child)
        capacity_spec = market = None
        if reservation_id is not None:
            capacity_spec = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=reservation_id))
        if uses_block:
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")

        self.launch_template = hardened_launch_template(
            f"{name}-lt", name_tag=name, root_gib=GPU_ROOT_VOLUME_GIB, tags=tags, opts=child,
            description=f"GPU nodes of pool {pool.label} ({pool.instance_type}, {pool.zone})",
            user_data=user_data(args.spec.shutdown_grace_s, args.spec.mig, efa=args.spec.efa),
            # A Capacity Block node group must name the instance type in its launch template.
            instance_type=pool.instance_type if uses_block else None,
            capacity_reservation_specification=capacity_spec,
            instance_market_options=market,
            network_interfaces=self._efa(args) if args.spec.efa else None,
        )
        self.node_group = self._node_group(name, args, uses_block, tags, after(opts))
        self.register_outputs({
            "nodeGroupName": self.node_group.node_group_name,
            "zone": pool.zone,
            "nodes": pool.nodes,
        })

    def _efa(self, args: GpuNodePoolArgs) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
        interfaces = _efa_interfaces(args.spec.pool, args.cluster, args.efa_security_group_id)
        self.efa_interfaces = len(interfaces)
        return interfaces

    def _capacity(self, name: str, ps: GpuPoolSettings, tags: dict[str, str],
                  child: pulumi.ResourceOptions) -> tuple[pulumi.Input[str] | None, bool]:
        """An ODCR, an existing Capacity Block, or one bought here: (reservation id, block-backed?)."""
        self.capacity_block = None
        block = ps.capacityBlock
        reservation_id: pulumi.Input[str] | None = ps.capacityReservationId
        if block is not None and block.id:
            reservation_id = block.id
        elif block is not None and block.purchase and block.allowPurchase:
            # Non-refundable: bought only when the stack says both purchase and allowPurchase,
            # and tagged as approved so the capacity-block-opt-in policy can see the opt-in on
            # the resource itself. Deleting this resource cannot cancel the block; it only forgets it.
            self.capacity_block = aws.ec2.CapacityBlockReservation(
                f"{name}-capacity-block", capacity_block_offering_id=block.offeringId,
                instance_platform="Linux/UNIX", tags={**tags, TAG_PURCHASE_APPROVED: "true"},
                opts=child)
            reservation_id = self.capacity_block.id
        # A Capacity Block launches instances only between its start and end: deploy (or scale)
        # a block-backed pool inside that window; EKS drains the nodes before the block ends.
        return reservation_id, block is not None and reservation_id is not None

    def _node_group(self, name: str, args: GpuNodePoolArgs, uses_block: bool, tags: dict[str, str],
                    update_after: list[pulumi.Resource]) -> aws.eks.NodeGroup:
        pool, cluster = args.spec.pool, args.cluster
        return aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=cluster.eks_cluster.name,
            node_role_arn=cluster.node_role.arn,
            subnet_ids=[args.network.private_subnets[pool.zone].id],
            ami_type=GPU_AMI_TYPE,
            capacity_type="CAPACITY_BLOCK" if uses_block else "ON_DEMAND",
            instance_types=None if uses_block else [pool.instance_type],
            scaling_config=scaling_config(args.spec),
            update_config=gpu_update_config(),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id, version=self.launch_template.latest_version.apply(str)),
            labels={LABEL_POOL: pool.label, **GPU_ROLE_LABEL, LABEL_ZONE: pool.zone},
            taints=[NODE_GROUP_GPU_TAINT],
            # The cluster's version (and the stated AMI release): raising kubernetesVersion upgrades the
            # control plane, then these nodes (EKS UpdateNodegroupVersion, one after another).
            version=cluster.eks_cluster.version,
            release_version=args.spec.ami_release_version,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*cluster.node_dependencies, *update_after],
                # A Capacity Block has no spare instance for a replacement node: EKS upgrades such a
                # group only at desired size 0. The program never upgrades it in place; the procedure
                # (scale to 0, upgrade, scale back) is in docs/operations.md.
                ignore_changes=(([] if args.spec.upgrades_in_place else ["version", "releaseVersion"])
                                # autoscaled: the cluster autoscaler owns the desired size between the bounds
                                + (["scalingConfig.desiredSize"] if args.spec.bounds is not None else [])) or None),
        )


def scaling_config(spec: NodePoolSpec) -> aws.eks.NodeGroupScalingConfigArgs:
    """The pool's nodes, fixed; or, autoscaled (deployment.autoscaling.NodeBounds), from the floor's
    nodes up to the ceiling's. EKS tags a managed node group's Auto Scaling group with
    `k8s.io/cluster-autoscaler/enabled` and `k8s.io/cluster-autoscaler/<cluster>` itself, which the
    cluster autoscaler's auto-discovery finds (docs/autoscaling-deploy.md)."""
    b = spec.bounds
    if b is None:
        n = spec.pool.nodes
        return aws.eks.NodeGroupScalingConfigArgs(desired_size=n, min_size=n, max_size=n)
    # Created at the ceiling's nodes (the peak's: the Deployments start at the plan's count too), then
    # the autoscaler removes the nodes KEDA's scale-down empties, down to the floor's.
    return aws.eks.NodeGroupScalingConfigArgs(desired_size=b.max_nodes, min_size=b.min_nodes, max_size=b.max_nodes)


def _efa_interfaces(pool: Pool, cluster: Cluster, efa_sg: pulumi.Input[str] | None = None
                    ) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """EFA: one interface per network card, all in the cluster security group (and the EFA one).

    Without EFA, EKS attaches the cluster security group itself; with explicit interfaces it
    cannot, so each interface carries it; the EFA security group (components/efa.py) adds the
    self-referencing all-traffic rules AWS requires for EFA."""
    facts = aws.ec2.get_instance_type(instance_type=pool.instance_type)
    if not facts.efa_supported:
        raise ValueError(f"{pool.instance_type} does not support EFA; set efa: false for pool {pool.label}")
    cards = min(facts.maximum_network_cards or 1, facts.efa_maximum_interfaces or 1)
    sg = cluster.eks_cluster.vpc_config.cluster_security_group_id
    return [aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        network_card_index=card, device_index=0 if card == 0 else 1, interface_type="efa",
        delete_on_termination="true", security_groups=[sg] + ([efa_sg] if efa_sg is not None else []))
        for card in range(cards)]
