"""One schema: the CRDs (as the API server admits them, with kubectl's strict field
validation) and the CLI's parse (``joiner plan`` and friends) accept the same NodePools and
NodeClasses. Objects are generated from valid ones by misspelling a field at any level of the
schema or putting a generated value in a field both sides check."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joiner.domain.known_fields import crd_schema
from joiner.domain.snapshot import SnapshotError, load_snapshot_yaml
from testworld.admission import CrdSchema

NODE_CLASS: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "JoinerNodeRole-demo",
        "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
        "kubelet": {"maxPods": 110, "systemReserved": {"cpu": "100m"}},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}],
        "metadataOptions": {"httpTokens": "required"},
    },
}
NODE_POOL: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        },
        "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "10%"}], "minSavings": {"perHour": 0.01}},
        "interruption": {"rebalance": "replace"},
        "limits": {"cpu": "100", "memory": "400Gi"},
        "weight": 10,
    },
}


def crd_accepts(obj: dict[str, Any]) -> bool:
    """Admitted with no cause, and nothing pruned (kubectl's default strict validation refuses
    an unknown field where the API server would prune it)."""
    admitted, causes = CrdSchema(crd_schema("joiner.dev/v1", obj["kind"])).admit(obj)
    return not causes and not _pruned(obj, admitted)


def _pruned(given: Any, admitted: Any) -> bool:
    if isinstance(given, dict) and isinstance(admitted, dict):
        return any(key not in admitted or _pruned(value, admitted[key]) for key, value in given.items())
    if isinstance(given, list) and isinstance(admitted, list):
        return any(_pruned(a, b) for a, b in zip(given, admitted, strict=False))
    return False


def cli_accepts(obj: dict[str, Any]) -> bool:
    try:
        load_snapshot_yaml(yaml.safe_dump(obj), strict=True)
    except SnapshotError:
        return False
    return True


def _mapping_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every mapping in the object (the object itself included), by path."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for key, item in value.items():
            found += _mapping_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _mapping_paths(item, (*path, index))
    return found


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def _misspell(name: str, how: int) -> str:
    return [name[:-1], name + "s", name[0].upper() + name[1:], name[:1] + name[2:] if len(name) > 2 else name + "x"][how % 4]


@pytest.mark.parametrize("base", [NODE_POOL, NODE_CLASS], ids=["NodePool", "NodeClass"])
def test_the_valid_objects_pass_both(base: dict[str, Any]) -> None:
    assert crd_accepts(base) and cli_accepts(base)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from([NODE_POOL, NODE_CLASS]), pick=st.integers(0, 10_000), how=st.integers(0, 3))
def test_a_misspelt_field_at_any_level_fails_both(base: dict[str, Any], pick: int, how: int) -> None:
    obj = copy.deepcopy(base)
    paths = [
        p
        for p in _mapping_paths(obj)
        if _at(obj, p) and "labels" not in p and "tags" not in p and "systemReserved" not in p and "limits" not in p and p != () and p[:1] != ("metadata",)
    ]
    path = paths[pick % len(paths)]
    mapping = _at(obj, path)
    keys = sorted(mapping)
    key = keys[pick % len(keys)]
    wrong = _misspell(key, how)
    if wrong in mapping:
        return
    mapping[wrong] = mapping.pop(key)
    assert crd_accepts(obj) == cli_accepts(obj), (path, key, wrong)
    assert not cli_accepts(obj), (path, key, wrong)


QUANTITY = st.one_of(
    st.from_regex(r"\A[+-]?[0-9]{1,4}(\.[0-9]{1,2})?(m|k|Mi|Gi|Ti|M|G)?\Z"),
    st.integers(-(10**6), 10**6),
    st.sampled_from(["-4", "-0", "+4", "0", "1e3", ".5", "5.", "abc", "", "1Gi ", "4 "]),
)

#: Fields both sides check, with the values to try.
FIELDS: list[tuple[dict[str, Any], tuple[Any, ...], Any]] = [
    (NODE_POOL, ("spec", "limits", "cpu"), QUANTITY),
    (NODE_POOL, ("spec", "limits", "memory"), QUANTITY),
    (NODE_CLASS, ("spec", "kubelet", "systemReserved", "cpu"), QUANTITY.filter(lambda v: isinstance(v, str))),
    (NODE_POOL, ("spec", "weight"), st.integers(-5, 200)),
    (NODE_POOL, ("spec", "interruption", "rebalance"), st.sampled_from(["replace", "ignore", "Replace", "drain", ""])),
    (NODE_POOL, ("spec", "disruption", "consolidationPolicy"), st.sampled_from(["WhenEmpty", "WhenEmptyOrUnderutilized", "WhenUnderutilized", "Never"])),
    (NODE_POOL, ("spec", "template", "spec", "taints", 0, "effect"), st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", "noschedule", "Never"])),
    (NODE_POOL, ("spec", "disruption", "minSavings", "perHour"), st.one_of(st.floats(-10, 10), st.integers(-10, 10))),
    (NODE_CLASS, ("spec", "metadataOptions", "httpTokens"), st.sampled_from(["required", "optional", "Required", "none"])),
    (NODE_CLASS, ("spec", "kubelet", "maxPods"), st.integers(-3, 1000)),
]


@pytest.mark.parametrize("base,path,values", FIELDS, ids=[".".join(map(str, f[1])) for f in FIELDS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_generated_value_passes_both_or_fails_both(base: dict[str, Any], path: tuple[Any, ...], values: Any, data: st.DataObject) -> None:
    obj = copy.deepcopy(base)
    value = data.draw(values)
    _at(obj, path[:-1])[path[-1]] = value
    assert crd_accepts(obj) == cli_accepts(obj), (path, value, crd_accepts(obj), cli_accepts(obj))


@pytest.mark.parametrize("value", ["-4", -4, "-1Gi"])
def test_a_negative_limit_fails_both(value: Any) -> None:
    obj = copy.deepcopy(NODE_POOL)
    obj["spec"]["limits"]["cpu"] = value
    assert not crd_accepts(obj) and not cli_accepts(obj)


def test_node_clas_ref_fails_both() -> None:
    obj = copy.deepcopy(NODE_POOL)
    spec = obj["spec"]["template"]["spec"]
    spec["nodeClasRef"] = spec.pop("nodeClassRef")
    assert not crd_accepts(obj) and not cli_accepts(obj)


def test_the_bundled_kubernetes_field_names_match_the_client_models() -> None:
    """``joiner/data/kube-fields.json`` is what scripts/build_kube_fields.py builds from the
    pinned Kubernetes client: regenerate it when the client is upgraded."""
    from scripts.build_kube_fields import main as build

    assert build(["--check"]) == 0


def test_manifests_crds_are_the_packaged_crds() -> None:
    """``kubectl apply -f manifests/crds/`` applies the schemas the CLI checks against."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    packaged = root / "layers" / "joiner" / "python" / "joiner" / "data" / "crds"
    for path in sorted((root / "manifests" / "crds").glob("*.yaml")):
        assert path.resolve() == (packaged / path.name).resolve()
    assert {p.name for p in packaged.glob("*.yaml")} == {p.name for p in (root / "manifests" / "crds").glob("*.yaml")}
