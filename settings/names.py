"""Formats the settings accept, each with the rule it follows and why.

Kubernetes names (DNS-1123), the gateway's hostname (Gateway API's `Hostname`), Secret keys,
IAM role ARNs, AWS tags, model checkpoints, the system nodes' instance types, and the AWS names
the program derives from the stack name. Every checker returns the value or raises ValueError
with the fix; pydantic turns that into `key: message`.
"""
from __future__ import annotations

import difflib
import ipaddress
import re
import unicodedata

from conventions import (AI_GATEWAY_NAMESPACE, GATEWAY_CONTROLLER_NAMESPACE, GPU_PLUGIN_NAMESPACE, KEDA_NAMESPACE,
                         MONITORING_NAMESPACE, PROJECT, TAG_GPUS_PER_NODE, TAG_PURCHASE_APPROVED)

# DNS-1123 label (namespaces, most object names): k8s.io/apimachinery
# pkg/util/validation/validation.go.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Gateway API v1 `Hostname` (apis/v1/shared_types.go): a precise name, no scheme, port or path.
HOSTNAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A Secret's data key (IsConfigMapKey): letters, digits, '-', '_', '.'.
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# An IAM role ARN, `arn:<partition>:iam::<account>:role<path><name>` (IAM User Guide, "IAM
# identifiers", IAM ARNs; "Amazon Resource Names (ARNs)", ARN format: the account id is 12
# digits). ASCII only: Python's \d (and \w) match every Unicode digit (and letter), which AWS
# does not take. The partitions are those of AWS_REGIONS below.
ROLE_ARN = re.compile(r"arn:(?P<partition>aws|aws-cn|aws-us-gov):iam::(?P<account>[^:]*):role(?P<rest>/.*)",
                      re.ASCII | re.DOTALL)
ACCOUNT_ID = re.compile(r"[0-9]{12}", re.ASCII)
# IAM API Reference, CreateRole: RoleName "Length Constraints: Minimum length of 1. Maximum length
# of 64. Pattern: [\w+=,.@-]+" (AWS's \w is ASCII); Path "Minimum length of 1. Maximum length of
# 512. Pattern: (\u002F)|(\u002F[\u0021-\u007E]+\u002F)".
ROLE_NAME = re.compile(r"[A-Za-z0-9_+=,.@-]+", re.ASCII)
MAX_ROLE_NAME = 64
ROLE_PATH = re.compile(r"/|/[\x21-\x7e]+/", re.ASCII)
MAX_ROLE_PATH = 512
# A model hub id (org/name), or a path inside the pod's model cache (the node's NVMe, mounted at
# /models). S3 is not offered: vLLM reads it only through the Run:ai streamer (`--load-format
# runai_streamer`, an extra the image may lack) and the pods have no IAM role for a bucket.
HUB_ID = re.compile(r"[A-Za-z0-9][-\w.]{0,95}/[A-Za-z0-9][-\w.]{0,95}", re.ASCII)
MODEL_CACHE_MOUNT = "/models"
LOCAL_PATH = re.compile(r"/models/[-\w.][-\w./]*", re.ASCII)
# A name clients ask for (vLLM's --served-model-name): ASCII letters, digits and `-_./:`, so it is one
# argv element everywhere, one value in lm-eval's comma-separated --model_args, and no flag.
SERVED_NAME = re.compile(r"[A-Za-z0-9][-\w./:]{0,127}", re.ASCII)

# AWS tags: the punctuation the tag character set allows besides letters, separators and numbers;
# at most 50 tags per resource (AWS tagging limits), of which the program sets up to 4 (Name, the
# ELB role, the GPU count, the purchase opt-in) and EKS adds its own (eks:cluster-name,
# eks:nodegroup-name) on what it creates: 40 leaves room for all of them.
TAG_PUNCTUATION = frozenset("_.:/=+-@")
MAX_RESOURCE_TAGS = 50
MAX_STACK_TAGS = 40
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
# The keys the program sets itself (components/network.py's subnet roles, the node groups' tags).
PROGRAM_TAG_KEYS = frozenset({"Name", "kubernetes.io/role/elb", "kubernetes.io/role/internal-elb",
                              TAG_GPUS_PER_NODE, TAG_PURCHASE_APPROVED})
# The regions of the aws, aws-cn and aws-us-gov partitions in botocore 1.44.8's data/endpoints.json
# (constraints.txt pins it), copied so a stack check does not import botocore (~0.35 s).
AWS_REGIONS = (
    "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1",
    "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5",
    "ap-southeast-6", "ap-southeast-7", "ca-central-1", "ca-west-1", "eu-central-1", "eu-central-2", "eu-north-1",
    "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-central-1", "me-south-1",
    "mx-central-1", "sa-east-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2",
    "cn-north-1", "cn-northwest-1", "us-gov-east-1", "us-gov-west-1")

# Namespaces the serving namespace may not take: the cluster's own and the ones the program's
# other components install into (a NetworkPolicy or Namespace object there would break them).
RESERVED_NAMESPACES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease", GATEWAY_CONTROLLER_NAMESPACE, AI_GATEWAY_NAMESPACE,
    MONITORING_NAMESPACE, KEDA_NAMESPACE, GPU_PLUGIN_NAMESPACE})

# The system node group's AMI is AL2023 x86_64 (components/cluster.py), so Graviton types (m7g,
# c7g, ...) cannot boot it; these general-purpose x86 families and sizes can.
SYSTEM_FAMILIES = ("m5", "m5a", "m6i", "m6a", "m7i", "m7a", "c5", "c6i", "c6a", "c7i", "c7a", "r5", "r6i", "r7i")
SYSTEM_SIZES = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")
SYSTEM_INSTANCE_TYPES = tuple(f"{f}.{s}" for f in SYSTEM_FAMILIES for s in SYSTEM_SIZES)

PRIVATE_RANGES = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def dns_label(value: str, what: str = "name") -> str:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(f"'{value}' is not a valid {what} (DNS-1123 label: lowercase letters, digits and '-', "
                         "starting and ending with a letter or digit, at most 63 characters)")
    return value


def hostname(value: str) -> str:
    """RFC 1123 section 2.1 (a host name: labels of at most 63 characters, at most 253 in all),
    as Gateway API's `Hostname` and cert-manager's DNS-01 take it, and a name a public ACME CA
    issues for: not an IP address (Gateway API v1 shared_types.go: "IPs are not allowed"; Let's
    Encrypt issues no IP certificate over DNS-01), not a bare top-level domain, and a wildcard
    only over a registrable name (`*.example.com`, never `*.com`)."""
    shown = value[:80]
    if "://" in value or "/" in value or ":" in value:
        raise ValueError(f"'{shown}' is not a bare hostname; drop the scheme, port and path (e.g. llm.example.com)")
    if len(value) > 253:
        raise ValueError(f"'{shown}...' is {len(value)} characters; a hostname is at most 253 (RFC 1123)")
    if not value or not HOSTNAME.fullmatch(value):
        raise ValueError(f"'{shown}' is not a valid hostname; use lowercase DNS labels such as llm.example.com")
    labels = value.removeprefix("*.").split(".")
    long = [label for label in labels if len(label) > 63]
    if long:
        raise ValueError(f"'{shown}': label '{long[0][:20]}...' is {len(long[0])} characters; a DNS label is at most "
                         "63 (RFC 1123)")
    if _is_ip(value):
        raise ValueError(f"'{shown}' is an IP address; the gateway needs a DNS name (certificates are issued for "
                         "names), e.g. llm.example.com")
    if labels[-1].isdigit():
        raise ValueError(f"'{shown}': a top-level domain is never all digits (RFC 1123 2.1); use a DNS name")
    if len(labels) < 2:
        what = "a wildcard over a top-level domain" if value.startswith("*.") else "a bare top-level domain"
        raise ValueError(f"'{shown}' is {what}; use a name under a domain you hold, e.g. llm.example.com")
    return value


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def acme_server(value: str) -> str:
    """An ACME directory URL: https only (RFC 8555 section 6.1: "ACME ... MUST be performed over
    HTTPS"), a host name, no credentials. cert-manager's ClusterIssuer takes any string here, so a
    `file://` or `http://` URL would reach the cluster; refused with the reason."""
    import urllib.parse
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port
    except ValueError:
        parts = None
    example = "e.g. https://acme-v02.api.letsencrypt.org/directory"
    if parts is None or parts.scheme != "https" or not parts.hostname or " " in value:
        raise ValueError(f"'{value[:80]}' is not an https URL of an ACME directory (RFC 8555 requires HTTPS); {example}")
    if "@" in parts.netloc:
        raise ValueError(f"the ACME directory URL holds credentials; ACME authenticates with the account key, so "
                         f"give the URL alone, {example}")
    if _is_ip(parts.hostname):
        raise ValueError(f"'{value[:80]}' names an IP address; cert-manager checks the directory's certificate "
                         f"against its name, so give its DNS name, {example}")
    return value


def secret_key(value: str) -> str:
    """A Secret's data key, as k8s.io/apimachinery pkg/util/validation IsConfigMapKey checks it:
    at most 253 characters of `[-._a-zA-Z0-9]`, and not `.`, `..` or starting with `..`."""
    if not value or len(value) > 253 or not SECRET_KEY.fullmatch(value):
        raise ValueError(f"'{value[:80]}' is not a valid Secret key; use letters, digits, '-', '_' and '.'")
    if value in (".", "..") or value.startswith(".."):
        raise ValueError(f"'{value[:80]}' is not a valid Secret key: Kubernetes refuses '.', '..' and keys starting "
                         "with '..'; name it with a letter or digit first")
    return value


def role_arn(value: str) -> str:
    """An IAM role's ARN: a partition, a 12-digit account id (ASCII digits), `:role`, then the
    role's path (`role_path`) and name (`role_name`); see ROLE_ARN for the sources."""
    shown = ascii(value[:120])
    match = ROLE_ARN.fullmatch(value)
    if not match:
        raise ValueError(f"{shown} is not an IAM role ARN; use arn:aws:iam::<12-digit account>:role/<name>")
    account = match["account"]
    if not ACCOUNT_ID.fullmatch(account):
        what = "holds digits other than ASCII 0-9" if len(account) == 12 and account.isdigit() else "is not 12 digits"
        raise ValueError(f"{shown}: the account id {what}; an AWS account id is 12 ASCII digits (0-9), as "
                         "`aws sts get-caller-identity` prints it")
    rest = match["rest"]
    if rest.endswith("/"):
        raise ValueError(f"{shown} ends with '/'; a role ARN ends with the role's name "
                         "(arn:aws:iam::<account>:role/<name>, or role/<path>/<name>)")
    path, _, name = rest.rpartition("/")
    role_path(path + "/", shown)
    role_name(name, shown)
    return value


def role_path(path: str, arn: str) -> str:
    """An IAM path (CreateRole Path, ROLE_PATH): `/`, or `/.../` of printable ASCII, at most 512
    characters. An empty segment (`//`) is refused too: IAM paths are names between slashes
    (IAM identifiers, "Friendly names and paths": /division_abc/subdivision_xyz/), so `//` is a typo
    for the path the role really has, and the access entry would name no existing role."""
    if "//" in path:
        raise ValueError(f"{arn}: its path has an empty segment ('//'); write the role's path as IAM shows it "
                         "(`aws iam get-role --role-name <name> --query Role.Arn`)")
    if len(path) > MAX_ROLE_PATH or not ROLE_PATH.fullmatch(path):
        raise ValueError(f"{arn}: its path {ascii(path[:40])} is not an IAM path; IAM takes '/' or /<segment>/.../ "
                         f"of printable ASCII, at most {MAX_ROLE_PATH} characters (CreateRole Path)")
    return path


def role_name(name: str, arn: str) -> str:
    """An IAM role name (CreateRole RoleName, ROLE_NAME): 1 to 64 of ASCII letters, digits and + = , . @ _ -."""
    if len(name) > MAX_ROLE_NAME:
        raise ValueError(f"{arn}: the role name is {len(name)} characters; IAM role names are at most "
                         f"{MAX_ROLE_NAME} (CreateRole RoleName)")
    if not ROLE_NAME.fullmatch(name):
        raise ValueError(f"{arn}: {ascii(name[:40])} is not an IAM role name; IAM takes 1 to {MAX_ROLE_NAME} ASCII "
                         "letters, digits and + = , . @ _ - (CreateRole RoleName)")
    return name


def role_key(arn: str) -> tuple[str, str, str]:
    """Which role an ARN names: IAM role names are unique in an account whatever their path, and
    "not distinguished by case" (CreateRole RoleName), so role/a/x and role/X are the same role."""
    match = ROLE_ARN.fullmatch(arn)
    return (match["partition"], match["account"], match["rest"].rpartition("/")[2].lower()) if match else ("", "", arn)


def _tag_text_ok(text: str) -> bool:
    """AWS's tag character set, `^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)$` (letters, separators, numbers and
    _ . : / = + - @), checked by Unicode category: Python's re has no \\p{...}."""
    return all(c in TAG_PUNCTUATION or unicodedata.category(c)[0] in "LZN" for c in text)


def tag(key: str, value: str) -> None:
    """One tag, by the AWS tagging rules (docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html,
    "Tag naming limits and requirements"): key 1-128 characters, value 0-256, the character set
    above, `aws:` reserved. And not `kubernetes.io/cluster/...`: that tag marks a resource as
    owned by (or shared with) a cluster, and that cluster's controllers act on it: the AWS Load
    Balancer Controller and the cloud provider pick subnets and security groups by it."""
    shown = key[:40]
    if key.lower().startswith("aws:"):
        raise ValueError(f"tag '{shown}': the aws: prefix is reserved for AWS; rename it")
    if key.startswith(CLUSTER_TAG_PREFIX):
        raise ValueError(f"tag '{shown}': {CLUSTER_TAG_PREFIX}<name> tags hand resources to that cluster's "
                         "controllers; the program tags what its own cluster uses, so drop it")
    if key in PROGRAM_TAG_KEYS:
        raise ValueError(f"tag '{shown}': the program sets this tag itself; use another key")
    if not key or len(key) > 128 or len(value) > 256:
        raise ValueError(f"tag '{shown}': keys take 1 to 128 characters and values at most 256")
    for what, text in (("key", key), ("value", value)):
        if not _tag_text_ok(text):
            bad = next(c for c in text if not (c in TAG_PUNCTUATION or unicodedata.category(c)[0] in "LZN"))
            raise ValueError(f"tag '{shown.encode('unicode_escape').decode()}': its {what} holds {bad!r}; AWS takes "
                             "letters, digits, spaces and _ . : / = + - @")


def tags(values: dict[str, str]) -> dict[str, str]:
    """The stack's tags: each by `tag`, and at most MAX_STACK_TAGS of them."""
    if len(values) > MAX_STACK_TAGS:
        raise ValueError(f"{len(values)} tags; AWS takes at most {MAX_RESOURCE_TAGS} per resource and the program "
                         f"and EKS add up to {MAX_RESOURCE_TAGS - MAX_STACK_TAGS}, so give at most {MAX_STACK_TAGS}")
    for key, value in values.items():
        tag(key, value)
    return values


def region(value: str) -> str:
    """A region of the AWS partitions the program deploys to (aws, aws-cn, aws-us-gov), from
    botocore's endpoint data (`AWS_REGIONS`; tests/test_hostile_inputs.py checks the copy against
    botocore's endpoints.json, so the list moves with the pinned botocore)."""
    if value not in AWS_REGIONS:
        close = difflib.get_close_matches(value, AWS_REGIONS, n=1)
        hint = f"did you mean {close[0]}?" if close else "use e.g. us-east-1"
        raise ValueError(f"'{value[:40]}' is not an AWS region; {hint}")
    return value


# -- the AWS names the program derives from the stack name (components/cluster.py) ---------------
# A Pulumi stack name may hold '.' and up to 100 characters (settings/load.py STACK_NAME); these
# names take fewer, and no '.'. `stack_name_problems` checks each where the settings are loaded
# (settings/load.py settings_from_config), before anything reaches AWS. Every other AWS name the
# program creates (IAM roles, node groups, launch templates, security groups) is Pulumi's
# auto-name from a fixed resource name, never from the stack name.
# Amazon EKS API Reference, CreateCluster, request `name`: "Length Constraints: Minimum length of
# 1. Maximum length of 100. Pattern: ^[0-9A-Za-z][A-Za-z0-9\-_]*$".
EKS_CLUSTER_NAME = re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]*", re.ASCII)
MAX_EKS_CLUSTER_NAME = 100
# AWS KMS API Reference, CreateAlias, `AliasName`: "Maximum length of 256. Pattern:
# ^alias/[a-zA-Z0-9/_-]+$", and "The alias name cannot begin with alias/aws/. The alias/aws/ prefix
# is reserved for AWS managed keys" (KMS Developer Guide, "Create aliases").
KMS_ALIAS = re.compile(r"alias/[a-zA-Z0-9/_-]+", re.ASCII)
MAX_KMS_ALIAS = 256
# Amazon CloudWatch Logs API Reference, CreateLogGroup, `logGroupName`: "Maximum length of 512.
# Pattern: [\.\-_/#A-Za-z0-9]+".
LOG_GROUP_NAME = re.compile(r"[-._/#A-Za-z0-9]+", re.ASCII)
MAX_LOG_GROUP_NAME = 512


def cluster_name(stack: str) -> str:
    return f"{PROJECT}-{stack}"


def secrets_key_alias(stack: str) -> str:
    """The alias of the KMS key that envelope-encrypts the cluster's Secrets."""
    return f"alias/{cluster_name(stack)}-eks-secrets"


def control_plane_log_group(stack: str) -> str:
    """The log group EKS writes the control plane's logs to (its fixed name for the cluster)."""
    return f"/aws/eks/{cluster_name(stack)}/cluster"


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _refused(text: str, allowed: str) -> str:
    """The characters of `text` outside `allowed` (a regex character class), quoted."""
    return ", ".join(repr(c) for c in dict.fromkeys(re.sub(f"[{allowed}]", "", text)))


def eks_cluster_name(value: str) -> str:
    """EKS CreateCluster `name` (EKS_CLUSTER_NAME): 1-100 characters, letters, digits, - and _, a
    letter or digit first."""
    if len(value) > MAX_EKS_CLUSTER_NAME:
        raise ValueError(f"the EKS cluster name '{_clip(value)}' is {len(value)} characters, over EKS's "
                         f"{MAX_EKS_CLUSTER_NAME} (CreateCluster name)")
    if not EKS_CLUSTER_NAME.fullmatch(value):
        raise ValueError(f"the EKS cluster name '{_clip(value, 60)}' holds {_refused(value, '0-9A-Za-z_-')}, which EKS "
                         "refuses (CreateCluster name: letters, digits, '-' and '_')")
    return value


def kms_alias(value: str) -> str:
    """KMS CreateAlias `AliasName` (KMS_ALIAS): alias/ and letters, digits, / _ -, at most 256,
    not under alias/aws/."""
    if value.startswith("alias/aws/"):
        raise ValueError(f"the KMS alias '{_clip(value, 60)}' is under alias/aws/, which KMS reserves for AWS "
                         "managed keys (CreateAlias AliasName)")
    if len(value) > MAX_KMS_ALIAS:
        raise ValueError(f"the KMS alias '{_clip(value)}' is {len(value)} characters, over KMS's {MAX_KMS_ALIAS} "
                         "(CreateAlias AliasName)")
    if not KMS_ALIAS.fullmatch(value):
        raise ValueError(f"the KMS alias '{_clip(value, 60)}' holds {_refused(value[6:], 'a-zA-Z0-9/_-')}, which "
                         "KMS refuses (CreateAlias AliasName: letters, digits, '/', '_' and '-')")
    return value


def log_group_name(value: str) -> str:
    """CloudWatch Logs CreateLogGroup `logGroupName` (LOG_GROUP_NAME): 1-512 of letters, digits and . - _ / #."""
    if len(value) > MAX_LOG_GROUP_NAME:
        raise ValueError(f"the log group '{_clip(value)}' is {len(value)} characters, over CloudWatch Logs' "
                         f"{MAX_LOG_GROUP_NAME} (CreateLogGroup logGroupName)")
    if not LOG_GROUP_NAME.fullmatch(value):
        raise ValueError(f"the log group '{_clip(value, 60)}' holds {_refused(value, '-._/#A-Za-z0-9')}, which "
                         "CloudWatch Logs refuses (CreateLogGroup logGroupName: letters, digits, '.', '-', '_', '/' "
                         "and '#')")
    return value


# Each AWS name made from the stack name, with the rule it must keep.
STACK_DERIVED_NAMES = ((cluster_name, eks_cluster_name), (secrets_key_alias, kms_alias),
                       (control_plane_log_group, log_group_name))
# The longest stack name whose cluster name EKS takes (the tightest of the rules above): 88.
MAX_STACK_NAME = MAX_EKS_CLUSTER_NAME - len(cluster_name(""))


def stack_name_problems(stack: str) -> list[str]:
    """One problem per AWS name made from `stack` that AWS would refuse, each naming that name, its
    rule and the fix. A Pulumi stack name may hold '.', which EKS and KMS names may not."""
    problems = []
    for derive, rule in STACK_DERIVED_NAMES:
        try:
            rule(derive(stack))
        except ValueError as exc:
            problems.append(f"stack name '{_clip(stack)}': {exc}; rename the stack (`pulumi stack rename`, and its "
                            f"Pulumi.<stack>.yaml) to at most {MAX_STACK_NAME} letters, digits, '-' and '_'")
    return problems


def checkpoint(value: str) -> str:
    """A model hub id or a path in the model cache: nothing vLLM would read as an option."""
    if ".." in value.split("/") or not (HUB_ID.fullmatch(value) or LOCAL_PATH.fullmatch(value)):
        raise ValueError(f"'{value}' is not a checkpoint; use a model hub id (org/name) or a path under "
                         f"{MODEL_CACHE_MOUNT}/ on the node's model cache, without '..' or spaces")
    return value


def served_name(value: str) -> str:
    if not SERVED_NAME.fullmatch(value):
        raise ValueError(f"{value[:40]!a} is not a model name clients can ask for; use up to 128 ASCII letters, "
                         "digits and -_./: starting with a letter or digit")
    return value


def system_instance_type(value: str) -> str:
    if value not in SYSTEM_INSTANCE_TYPES:
        raise ValueError(f"'{value}' is not a supported system node type; use an x86 general-purpose type "
                         f"such as m7i.2xlarge (families {', '.join(SYSTEM_FAMILIES)})")
    return value


def private_cidr(value: str) -> str:
    net = ipaddress.ip_network(value, strict=True)
    if not any(net.version == r.version and net.subnet_of(r) for r in PRIVATE_RANGES):
        raise ValueError(f"{value} is not in a private range; use part of 10.0.0.0/8, 172.16.0.0/12 "
                         "or 192.168.0.0/16")
    return value
