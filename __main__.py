"""The llm-serving Pulumi program: stack config -> settings -> sizing plan -> components -> outputs.

Only wiring lives here; every number a component needs comes from the plan.
"""
import pulumi

from conventions import (
    AI_GATEWAY_NAMESPACE, CERT_MANAGER_NAMESPACE, EXTERNAL_DNS_NAMESPACE, GATEWAY_CONTROLLER_NAMESPACE, GPU_PLUGIN_NAMESPACE,
    KEDA_NAMESPACE, LWS_NAMESPACE, MONITORING_NAMESPACE,
)
from components.accuracy_gate import AccuracyGate, AccuracyGateArgs
from components.cert_manager import CertManager, CertManagerArgs, GatewayCertificate, GatewayCertificateArgs
from components.cluster import Cluster, ClusterArgs
from components.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from components.external_dns import ExternalDns, ExternalDnsArgs
from components.efa import EfaPlugin, EfaPluginArgs, EfaSecurityGroup, EfaSecurityGroupArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.leader_worker_set import LwsController, LwsControllerArgs
from components.gateway import Gateway, GatewayArgs
from components.gpu_plugin import GpuPlugin, GpuPluginArgs
from components.load_balancer_controller import LoadBalancerController, LoadBalancerControllerArgs
from components.loadtest import LoadTest, LoadTestArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.namespace_policies import NamespacePolicies, NamespacePoliciesArgs
from components.network import Network, NetworkArgs, network_zones
from components.serving import Serving, ServingArgs
from deployment.namespace_policies import PolicyPeers
from deployment.spec import deployment_spec
from settings import SettingsError, sizing_problem
from settings.pulumi_config import refuse_example_values, require_secrets, secret, settings_from_pulumi
from sizing.planner import plan as make_plan
from sizing.workload import SizingError

try:
    settings = settings_from_pulumi()
    plan = make_plan(settings.plan_request())
    spec = deployment_spec(plan, settings)      # every figure the components use, derived once
except SettingsError as exc:       # one line per problem, each naming the key; no traceback
    raise pulumi.RunError(f"invalid stack config:\n{exc}") from None
except SizingError as exc:
    raise pulumi.RunError(f"no plan for this stack config: {sizing_problem(exc)}") from None
refuse_example_values(settings)    # on a real engine only: the committed stacks' example values
require_secrets(settings)          # one line naming `pulumi config set --secret` when one is missing

# -- AWS: network -> cluster -> one GPU node pool per (zone, pool) ---------------------------------
network = Network("llm", NetworkArgs(
    vpc_cidr=settings.network.vpcCidr,
    region=settings.region,
    zones=network_zones(settings.zones, settings.region),
    nat_per_zone=settings.nat_per_zone,
    tags=settings.tags,
))
cluster = Cluster("llm", ClusterArgs(
    stack=settings.stack, environment=settings.environment, region=settings.region,
    kubernetes_version=settings.kubernetesVersion, api_allowed_cidrs=settings.apiAllowedCidrs,
    admin_role_arns=settings.adminRoleArns, view_role_arns=settings.previewRoleArns, system_nodes=settings.systemNodes, tags=settings.tags,
    node_ami_release_version=settings.nodeAmiReleaseVersion,
    network=network))
efa = spec.efa                   # on wherever a pool asks for it or a replica spans nodes
efa_sg = EfaSecurityGroup("efa", EfaSecurityGroupArgs(vpc_id=network.vpc.id, tags=settings.tags)) if efa else None
gpu_pools: list[GpuNodePool] = []
for pool_spec in spec.node_pools:     # each updates after the one before
    gpu_pools.append(GpuNodePool(f"gpu-{pool_spec.pool.label}", GpuNodePoolArgs(
        tags=settings.tags, spec=pool_spec, cluster=cluster, network=network,
        efa_security_group_id=efa_sg.security_group.id if efa_sg else None),
        opts=pulumi.ResourceOptions(depends_on=[p.node_group for p in gpu_pools[-1:]])))

# -- controllers the gateway needs: load balancer, certificate, DNS (each through Pod Identity) ---
gw_settings = settings.gateway
controller_base = dict(cluster_name=cluster.cluster_name, region=settings.region, provider=cluster.k8s_provider,
                       tags=settings.tags, kubernetes_version=settings.kubernetesVersion)
after_pod_identity_agent = pulumi.ResourceOptions(depends_on=[cluster.pod_identity_agent])
load_balancer_controller = LoadBalancerController("aws-lb-controller", LoadBalancerControllerArgs(
    vpc_id=network.vpc.id, **controller_base), opts=after_pod_identity_agent)
gateway_controllers = [load_balancer_controller.release]
cert_manager = None
if gw_settings.certificate == "acme":
    cert_manager = CertManager("cert-manager", CertManagerArgs(
        hosted_zone_id=gw_settings.hostedZoneId, acme_server=gw_settings.acmeServer,
        acme_email=gw_settings.acmeEmail, **controller_base), opts=after_pod_identity_agent)
if gw_settings.manages_dns:
    gateway_controllers.append(ExternalDns("external-dns", ExternalDnsArgs(
        hosted_zone_id=gw_settings.hostedZoneId, **controller_base), opts=after_pod_identity_agent).release)

# -- Kubernetes: GPU plugin -> vLLM replicas (per zone) -> gateway (auth, quotas, routing) --------
gpu_plugin = GpuPlugin("gpu-plugin", GpuPluginArgs(
    provider=cluster.k8s_provider, kubernetes_version=settings.kubernetesVersion,
    mig_strategy="mixed" if any(p.mig for p in spec.node_pools) else None),
    opts=pulumi.ResourceOptions(depends_on=gpu_pools))
if any(p.bounds is not None for p in spec.node_pools):     # serving.autoscaling: the GPU node groups follow KEDA
    ClusterAutoscaler("cluster-autoscaler", ClusterAutoscalerArgs(
        scale_down_unneeded_s=spec.serving.autoscaling[0].scale_down_stabilization_s, **controller_base),
        opts=pulumi.ResourceOptions(depends_on=[cluster.pod_identity_agent, *gpu_pools]))
serving_after: list[pulumi.Resource] = [gpu_plugin]
lws = None
if efa:
    serving_after.append(EfaPlugin("efa-plugin", EfaPluginArgs(provider=cluster.k8s_provider),
                                   opts=pulumi.ResourceOptions(depends_on=gpu_pools)).release)
if spec.spans_nodes:     # replicas that span nodes: one LeaderWorkerSet each, after its controller
    lws = LwsController("lws", LwsControllerArgs(provider=cluster.k8s_provider, kubernetes_version=settings.kubernetesVersion),
                        opts=pulumi.ResourceOptions(depends_on=[cluster.system_node_group]))
    serving_after.append(lws.release)
serving = Serving("serving", ServingArgs(
    spec=spec.serving, provider=cluster.k8s_provider, hub_token=secret("hubToken"), gateway_namespace=GATEWAY_CONTROLLER_NAMESPACE,
    group_controller=lws.release if lws else None,
    efa_devices=min(p.efa_interfaces for p in gpu_pools) if spec.spans_nodes or spec.kv_over_efa else 0,
    kubernetes_version=settings.kubernetesVersion),
    opts=pulumi.ResourceOptions(depends_on=serving_after))
certificate = GatewayCertificate("gateway-certificate", GatewayCertificateArgs(
    hostname=gw_settings.hostname, namespace=serving.namespace_name, secret_name=gw_settings.tlsSecretName,
    provider=cluster.k8s_provider,
    issuer_name=cert_manager.issuer_name if cert_manager else None,
    certificate_pem=secret("tlsCertificate") if cert_manager is None else None,
    private_key_pem=secret("tlsPrivateKey") if cert_manager is None else None),
    opts=pulumi.ResourceOptions(depends_on=[
        serving.namespace, *((cert_manager.release, cert_manager.issuer) if cert_manager else ())]))
gateway = Gateway("llm-gateway", GatewayArgs(
    spec=spec.gateway, provider=cluster.k8s_provider, api_keys=secret("apiKeys"),
    namespace=serving.namespace_name, service_name=serving.service_name, tls_secret_name=certificate.secret_name,
    kubernetes_version=settings.kubernetesVersion, cluster_cidrs=network.private_cidrs,
    controllers=(*gateway_controllers, certificate)), opts=pulumi.ResourceOptions(depends_on=[serving]))

# -- proving the rollout: the FP8 accuracy gate (awaited: a failed gate fails `pulumi up`; on by
# default in staging and prod), then the load test against the plan (opt-in: loadTest.enabled)
proof = [serving, gateway]
if spec.accuracy_gate is not None:
    proof.append(AccuracyGate("accuracy-gate", AccuracyGateArgs(
        spec=spec.accuracy_gate, provider=cluster.k8s_provider,
        namespace=serving.namespace_name,
        api_keys=secret("apiKeys"), hub_token=secret("hubToken")), opts=pulumi.ResourceOptions(depends_on=list(proof))))
if spec.load_test is not None:
    LoadTest("load-test", LoadTestArgs(
        spec=spec.load_test, provider=cluster.k8s_provider,
        namespace=serving.namespace_name,
        api_keys=secret("apiKeys"), hub_token=secret("hubToken")), opts=pulumi.ResourceOptions(depends_on=list(proof)))

# -- monitoring: Prometheus, Grafana, DCGM exporter; alert thresholds and dashboard lines from the plan
monitoring = Monitoring("monitoring", MonitoringArgs(
    plan=plan, stack=settings.stack, environment=settings.environment, zones=settings.zones,
    serving_namespace=settings.serving.namespace, inference_extension=gw_settings.inferenceExtension,
    provider=cluster.k8s_provider, grafana_admin_password=secret("grafanaAdminPassword"),
    gateway_namespace=GATEWAY_CONTROLLER_NAMESPACE, kubernetes_version=settings.kubernetesVersion,
    autoscaling=bool(spec.serving.autoscaling)),
    opts=pulumi.ResourceOptions(depends_on=[gpu_plugin]))

# -- default-deny network policies for the monitoring, gateway and controller namespaces (the serving
# namespace has its own), each after the component whose namespace it is
policed = [(MONITORING_NAMESPACE, monitoring), (GATEWAY_CONTROLLER_NAMESPACE, gateway), (GPU_PLUGIN_NAMESPACE, gpu_plugin)]
policed += [(AI_GATEWAY_NAMESPACE, gateway)] if gw_settings.inferenceExtension else []
policed += [(CERT_MANAGER_NAMESPACE, cert_manager)] if cert_manager else []
policed += [(EXTERNAL_DNS_NAMESPACE, gateway_controllers[-1])] if gw_settings.manages_dns else []
policed += [(LWS_NAMESPACE, lws)] if lws else []
policed += [(KEDA_NAMESPACE, serving)] if serving.keda else []
NamespacePolicies("namespace-policies", NamespacePoliciesArgs(
    provider=cluster.k8s_provider, namespaces=tuple(ns for ns, _ in policed),
    peers=PolicyPeers(cluster_cidrs=network.private_cidrs, vpc_cidr=settings.network.vpcCidr,
                      serving_namespace=serving.namespace_name, inference_extension=gw_settings.inferenceExtension)),
    opts=pulumi.ResourceOptions(depends_on=[component for _, component in policed]))

# -- outputs --------------------------------------------------------------------------------------
pulumi.export("clusterName", cluster.cluster_name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gatewayHostname", settings.gateway.hostname)     # the name clients use (external-dns publishes it when the stack has its hosted zone)
pulumi.export("gatewayAddress", gateway.address)                 # the load balancer, once it exists
pulumi.export("plan", spec.exports)      # the figures of `size --json`, camelCase (deployment/exports.py)
