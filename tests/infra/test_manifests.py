"""CRDs, RBAC and examples: schema shape, defaults, printer columns, and that the examples
validate against the CRDs and parse with Joiner's own parser."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from joiner.domain.snapshot import parse_node_class, parse_node_pool

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def load(relative: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / relative).read_text()) if doc]


def crd(kind_file: str) -> dict:
    (document,) = load(f"crds/{kind_file}")
    return document


@pytest.fixture(scope="module")
def validators() -> dict[str, jsonschema.Draft7Validator]:
    result = {}
    for file_name in ("nodepools.joiner.dev.yaml", "nodeclasses.joiner.dev.yaml"):
        document = crd(file_name)
        schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        jsonschema.Draft7Validator.check_schema(schema)
        result[document["spec"]["names"]["kind"]] = jsonschema.Draft7Validator(schema)
    return result


def examples() -> list[tuple[str, dict]]:
    return [
        (f"{path.name}:{doc['metadata']['name']}", doc) for path in sorted((MANIFESTS / "examples").glob("*.yaml")) for doc in load(f"examples/{path.name}")
    ]


@pytest.mark.parametrize(
    ("file_name", "plural", "kind"),
    [
        ("nodepools.joiner.dev.yaml", "nodepools", "NodePool"),
        ("nodeclasses.joiner.dev.yaml", "nodeclasses", "NodeClass"),
        ("nodeclaims.joiner.dev.yaml", "nodeclaims", "NodeClaim"),
    ],
)
def test_crds_are_cluster_scoped_v1_served_and_stored_with_status(file_name, plural, kind):
    document = crd(file_name)
    assert document["apiVersion"] == "apiextensions.k8s.io/v1" and document["metadata"]["name"] == f"{plural}.joiner.dev"
    spec = document["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == ("joiner.dev", "Cluster", kind, plural)
    (version,) = spec["versions"]
    scale = {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}} if kind == "NodePool" else {}
    # a static NodePool answers kubectl scale
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == ("v1", True, True, {"status": {}, **scale})


def test_kubectl_get_nodepools_columns():
    (version,) = crd("nodepools.joiner.dev.yaml")["spec"]["versions"]
    shown = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 0]
    assert shown == [
        ("NodeClass", ".spec.template.spec.nodeClassRef.name"),
        ("Nodes", ".status.nodes"),
        ("CPU", ".status.resources.cpu"),
        ("Memory", ".status.resources.memory"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_kubectl_get_nodeclaims_columns_are_karpenters():
    """TYPE, CAPACITY, ZONE, NODE, READY, AGE, as ``kubectl get nodeclaims`` shows Karpenter's;
    ``-o wide`` adds the instance id, NodePool, price and state."""
    (version,) = crd("nodeclaims.joiner.dev.yaml")["spec"]["versions"]
    shown = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 0]
    assert shown == [
        ("Type", ".status.instanceType"),
        ("Capacity", ".status.capacityType"),
        ("Zone", ".status.zone"),
        ("Node", ".status.nodeName"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        ("Age", ".metadata.creationTimestamp"),
    ]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 1]
    assert wide == ["ID", "NodePool", "Price", "State"]


def test_nodepool_schema_defaults_and_enums():
    schema = crd("nodepools.joiner.dev.yaml")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    template_spec = schema["template"]["properties"]["spec"]["properties"]
    requirement = template_spec["requirements"]["items"]["properties"]
    assert requirement["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
    assert template_spec["expireAfter"]["default"] == "720h"
    disruption = schema["disruption"]["properties"]
    assert disruption["consolidationPolicy"] == {"type": "string", "enum": ["WhenEmpty", "WhenEmptyOrUnderutilized"], "default": "WhenEmptyOrUnderutilized"}
    assert disruption["consolidateAfter"]["default"] == "0s"
    assert disruption["budgets"]["default"] == [{"nodes": "10%"}]
    assert disruption["budgets"]["items"]["properties"]["nodes"]["pattern"] == "^((100|[0-9]{1,2})%|[0-9]+)$"
    assert disruption["budgets"]["items"]["properties"]["reasons"]["items"]["enum"] == ["Empty", "Drifted", "Underutilized", "Expired"]
    assert schema["interruption"]["properties"]["rebalance"]["enum"] == ["replace", "ignore"]
    assert (schema["weight"]["minimum"], schema["weight"]["maximum"]) == (1, 100)
    assert schema["limits"]["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_nodeclass_schema_defaults():
    schema = crd("nodeclasses.joiner.dev.yaml")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert schema["amiFamily"]["default"] == "AL2023"
    assert schema["metadataOptions"]["default"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }


@pytest.mark.parametrize(("name", "document"), examples(), ids=[name for name, _ in examples()])
def test_examples_validate_and_parse(validators, name, document):
    assert document["apiVersion"] == "joiner.dev/v1"
    errors = [f"{list(e.path)}: {e.message}" for e in validators[document["kind"]].iter_errors(document)]
    assert errors == []
    if document["kind"] == "NodePool":
        assert parse_node_pool(document).name == document["metadata"]["name"]
    else:
        assert parse_node_class(document).name == document["metadata"]["name"]


def test_examples_cover_the_documented_pools():
    names = {(doc["kind"], doc["metadata"]["name"]) for _, doc in examples()}
    assert {("NodePool", "default"), ("NodePool", "addons"), ("NodePool", "spot"), ("NodePool", "gpu"), ("NodeClass", "default")} <= names
    pools = {doc["metadata"]["name"]: doc for _, doc in examples() if doc["kind"] == "NodePool"}
    addons = pools["addons"]["spec"]["template"]["spec"]
    assert addons["taints"] and {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["on-demand"]} in addons["requirements"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "c5.2xlarge"], "minValues": 2} in pools["spot"]["spec"][
        "template"
    ]["spec"]["requirements"]


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        (lambda d: d["spec"]["template"]["spec"]["requirements"][0].update(operator="Matches"), "NodePool"),
        (lambda d: d["spec"]["disruption"]["budgets"].append({"nodes": "101%"}), "NodePool"),
        (lambda d: d["spec"]["disruption"].update(consolidateAfter="5 minutes"), "NodePool"),
        (lambda d: d["spec"].update(weight=0), "NodePool"),
        (lambda d: d["spec"]["limits"].update(cpu="lots"), "NodePool"),
        (lambda d: d["spec"]["template"]["spec"]["nodeClassRef"].update(kind="EC2NodeClass"), "NodePool"),
        (lambda d: d["spec"]["disruption"]["budgets"][1].update(reasons=["Bored"]), "NodePool"),
        (lambda d: d["spec"].update(amiFamily="Windows2022"), "NodeClass"),
        (lambda d: d["spec"].update(amiFamily="Bottlerocket"), "NodeClass"),
        (lambda d: d["spec"].update(amiSelectorTerms=[{"alias": "bottlerocket@latest"}]), "NodeClass"),
        (lambda d: d["spec"].update(amiSelectorTerms=[{"alias": "al2@latest"}]), "NodeClass"),
        (lambda d: d["spec"]["metadataOptions"].update(httpTokens="sometimes"), "NodeClass"),
        (lambda d: d["spec"].pop("subnetSelectorTerms"), "NodeClass"),
        (lambda d: d["spec"]["subnetSelectorTerms"].append({"id": "sg-123"}), "NodeClass"),
    ],
)
def test_schema_rejects_invalid_objects(validators, mutate, kind):
    document = copy.deepcopy(next(doc for _, doc in examples() if doc["kind"] == kind and doc["metadata"]["name"] == "default"))
    mutate(document)
    assert list(validators[kind].iter_errors(document))


def test_rbac_grants_only_what_joiner_uses():
    role, binding, _, _ = load("rbac.yaml")
    assert role["kind"] == "ClusterRole" and binding["kind"] == "ClusterRoleBinding"
    grants = {(group, resource): set(rule["verbs"]) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]}
    assert grants == {
        ("", "pods"): {"get", "list", "watch", "delete"},
        ("", "pods/eviction"): {"create"},
        ("", "pods/status"): {"patch"},
        ("", "nodes"): {"get", "list", "watch", "patch", "update", "delete"},
        ("", "events"): {"create", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
        ("apps", "daemonsets"): {"list"},
        ("policy", "poddisruptionbudgets"): {"list"},
        ("node.k8s.io", "runtimeclasses"): {"list"},
        ("", "persistentvolumeclaims"): {"list"},
        ("", "persistentvolumes"): {"list"},
        ("storage.k8s.io", "storageclasses"): {"list"},
        ("storage.k8s.io", "csinodes"): {"list"},
        ("joiner.dev", "nodepools"): {"get", "list", "watch"},
        ("joiner.dev", "nodeclasses"): {"get", "list", "watch"},
        ("joiner.dev", "nodepools/status"): {"patch", "update"},
        ("joiner.dev", "nodeclasses/status"): {"patch", "update"},
        ("joiner.dev", "nodeclaims"): {"get", "list", "watch", "create", "patch", "delete"},
        ("joiner.dev", "nodeclaims/status"): {"patch"},
        ("joiner.dev", "nodeoverlays"): {"list"},
        ("joiner.dev", "nodeoverlays/status"): {"patch"},
    }
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "joiner:controller"}]


def test_the_watcher_may_only_list_and_watch_what_it_watches():
    _, _, role, binding = load("rbac.yaml")
    grants = {(group, resource): set(rule["verbs"]) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]}
    assert grants == {
        ("", "pods"): {"list", "watch"},
        ("", "nodes"): {"list", "watch"},
        ("joiner.dev", "nodepools"): {"list", "watch"},
        ("joiner.dev", "nodeclasses"): {"list", "watch"},
    }
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "joiner-watcher"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "joiner:watcher"}]


@pytest.mark.parametrize(("index", "heading"), [(0, "## Permissions Joiner needs in the cluster"), (2, "## Permissions of the watcher")])
def test_the_documented_permission_table_is_the_rbac_manifest(index, heading):
    """docs/kubernetes.md lists exactly what manifests/rbac.yaml grants (issue 16 section 6)."""
    role = load("rbac.yaml")[index]
    granted = {
        ("" if group == "" else group, resource, frozenset(rule["verbs"]))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    text = (MANIFESTS.parent / "docs" / "kubernetes.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            group = "" if cells[0] == "core" else cells[0]
            documented.add((group, cells[1].strip("`"), frozenset(v.strip() for v in cells[2].split(","))))
    assert documented == granted


#: The names Karpenter's CRDs (karpenter.sh/v1 NodePool and NodeClaim, karpenter.k8s.aws/v1
#: EC2NodeClass) answer to in kubectl, short names included.
KARPENTER_NAMES = frozenset({"nodepools", "nodepool", "nodeclaims", "nodeclaim", "ec2nodeclasses", "ec2nodeclass", "ec2nc", "ec2ncs"})
#: A resource argument kubectl could resolve to either project's CRD while both are installed.
AMBIGUOUS = re.compile(r"^(nodepools?|nodeclass(es)?|nodeclaims?)$", re.IGNORECASE)


@pytest.mark.parametrize(
    ("file_name", "short"), [("nodepools.joiner.dev.yaml", ["jnp"]), ("nodeclasses.joiner.dev.yaml", ["jnc"]), ("nodeclaims.joiner.dev.yaml", ["jncl"])]
)
def test_crds_have_short_names_karpenter_does_not_use(file_name, short):
    names = crd(file_name)["spec"]["names"]
    assert names["shortNames"] == short and not set(short) & KARPENTER_NAMES


def kubectl_commands() -> list[tuple[str, str]]:
    """Every ``kubectl`` command the README, docs and manifests show: (where, command)."""
    root = MANIFESTS.parent
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(MANIFESTS.rglob("*.yaml"))]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for command in re.findall(r"kubectl [^`#|>]*", line):
                found.append((f"{path.relative_to(root)}:{number}", command.strip()))
    return found


def test_documented_kubectl_commands_name_joiner_and_karpenter_resources_unambiguously():
    commands = kubectl_commands()
    assert any("nodepools.joiner.dev" in command for _, command in commands)
    ambiguous = [
        (where, command) for where, command in commands for argument in command.split()[2:] for resource in argument.split(",") if AMBIGUOUS.match(resource)
    ]
    assert ambiguous == []


def test_the_documented_karpenter_permission_table_is_the_karpenter_rbac_manifest():
    """docs/kubernetes.md lists exactly what manifests/rbac-karpenter.yaml grants, to joiner:controller only."""
    role, binding = load("rbac-karpenter.yaml")
    granted = {(group, resource, frozenset(rule["verbs"])) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]}
    text = (MANIFESTS.parent / "docs" / "kubernetes.md").read_text()
    section = text.split("## Permissions for reading Karpenter's objects", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            documented.add((cells[0], cells[1].strip("`"), frozenset(v.strip() for v in cells[2].split(","))))
    assert documented == granted
    assert all(verbs <= {"list", "patch"} for _, _, verbs in granted)
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "joiner-karpenter"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "joiner:controller"}]
