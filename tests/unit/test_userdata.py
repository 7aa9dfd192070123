"""AL2023 nodeadm user data: NodeConfig content, MIME layout, validation and determinism."""

from __future__ import annotations

import email
from email.message import Message
from typing import cast

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.model import KubeletConfig, Taint
from joiner.domain.resources import Resources
from joiner.domain.userdata import (
    BOUNDARY,
    MAX_USER_DATA_BYTES,
    NODECONFIG_CONTENT_TYPE,
    ClusterBootstrap,
    UserDataError,
    build_user_data,
    decode_user_data,
    encode_user_data,
    format_exact_quantity,
    kubelet_may_set_label,
    node_config,
    parse_user_data,
)

CLUSTER = ClusterBootstrap(
    name="demo",
    api_server_endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com",
    certificate_authority="LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
    service_cidr="10.100.0.0/16",
    cluster_dns="10.100.0.10",
)


def _flags(document: dict) -> dict[str, str]:
    flags = document["spec"]["kubelet"].get("flags", [])
    return dict(flag[2:].split("=", 1) for flag in flags)


def _node_config_part(user_data: str) -> dict:
    parts = parse_user_data(user_data)
    assert parts[0].content_type == NODECONFIG_CONTENT_TYPE
    return yaml.safe_load(parts[0].content)


def test_node_config_carries_cluster_kubelet_labels_and_taints() -> None:
    kubelet = KubeletConfig(
        max_pods=58,
        system_reserved=Resources.parse({"cpu": "100m", "memory": "100Mi"}),
        kube_reserved=Resources.parse({"cpu": "70m", "memory": "1536Mi", "ephemeral-storage": "1Gi"}),
        eviction_hard={"memory.available": "100Mi", "nodefs.available": "10%"},
    )
    user_data = build_user_data(
        CLUSTER,
        kubelet,
        labels={"joiner.dev/nodepool": "default", "team": "a"},
        taints=(Taint("dedicated", "gpu", "NoSchedule"), Taint("joiner.dev/unregistered", "", "NoExecute")),
    )
    document = _node_config_part(user_data)
    assert document["apiVersion"] == "node.eks.aws/v1alpha1"
    assert document["kind"] == "NodeConfig"
    assert document["spec"]["cluster"] == {
        "name": "demo",
        "apiServerEndpoint": CLUSTER.api_server_endpoint,
        "certificateAuthority": CLUSTER.certificate_authority,
        "cidr": "10.100.0.0/16",
    }
    config = document["spec"]["kubelet"]["config"]
    assert config == {
        "maxPods": 58,
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "kubeReserved": {"cpu": "70m", "ephemeral-storage": "1Gi", "memory": "1536Mi"},
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
        "clusterDNS": ["10.100.0.10"],
    }
    flags = _flags(document)
    assert flags["node-labels"] == "joiner.dev/nodepool=default,team=a"
    assert flags["register-with-taints"] == "dedicated=gpu:NoSchedule,joiner.dev/unregistered:NoExecute"


def test_user_data_is_a_mime_archive_cloud_init_can_read() -> None:
    user_data = build_user_data(CLUSTER, labels={"a": "b"})
    message = email.message_from_string(user_data)
    assert message.is_multipart()
    assert message.get_content_type() == "multipart/mixed"
    assert message.get_boundary() == BOUNDARY
    parts = cast("list[Message]", message.get_payload())  # a multipart payload is its list of parts
    assert [part.get_content_type() for part in parts] == [NODECONFIG_CONTENT_TYPE]
    assert decode_user_data(encode_user_data(user_data)) == user_data


def test_kubelet_config_defaults_are_left_to_nodeadm() -> None:
    """No maxPods / kubeReserved given: nodeadm computes them from the instance type."""
    document = node_config(ClusterBootstrap("c", "https://x", "QUJD", "172.20.0.0/16"))
    assert "kubelet" not in document["spec"]


def test_output_is_deterministic_whatever_the_input_order() -> None:
    first = build_user_data(CLUSTER, labels={"b": "2", "a": "1"}, taints=(Taint("k", "v"),))
    second = build_user_data(CLUSTER, labels={"a": "1", "b": "2"}, taints=(Taint("k", "v"),))
    assert first == second
    assert "--node-labels=a=1,b=2" in first


def test_extra_shell_script_is_appended_as_its_own_part() -> None:
    script = "#!/bin/bash\necho hello > /tmp/hello\n"
    parts = parse_user_data(build_user_data(CLUSTER, extra_user_data=script))
    assert [p.content_type for p in parts] == [NODECONFIG_CONTENT_TYPE, 'text/x-shellscript; charset="us-ascii"']
    assert parts[1].content == script.strip("\n")


def test_extra_mime_archive_is_flattened_into_parts() -> None:
    archive = (
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="XYZ"\n\n'
        "--XYZ\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        "#!/bin/bash\necho one\n"
        "--XYZ\n"
        "Content-Type: application/node.eks.aws\n\n"
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n"
        "--XYZ--\n"
    )
    parts = parse_user_data(build_user_data(CLUSTER, extra_user_data=archive))
    assert [p.content_type for p in parts] == [NODECONFIG_CONTENT_TYPE, 'text/x-shellscript; charset="us-ascii"', NODECONFIG_CONTENT_TYPE]
    assert parts[1].content == "#!/bin/bash\necho one"
    assert yaml.safe_load(parts[2].content)["spec"]["kubelet"]["config"]["shutdownGracePeriod"] == "30s"


def test_extra_node_config_yaml_is_recognised() -> None:
    extra = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  instance:\n    localStorage:\n      strategy: RAID0\n"
    parts = parse_user_data(build_user_data(CLUSTER, extra_user_data=extra))
    assert parts[1].content_type == NODECONFIG_CONTENT_TYPE


def test_unrecognised_extra_user_data_is_rejected_naming_the_field() -> None:
    with pytest.raises(UserDataError, match=r"NodeClass gpu spec.userData: unrecognised"):
        build_user_data(CLUSTER, extra_user_data="just some words", where="NodeClass gpu")


def test_extra_user_data_containing_the_boundary_is_rejected() -> None:
    with pytest.raises(UserDataError, match="boundary"):
        build_user_data(CLUSTER, extra_user_data=f"#!/bin/bash\necho --{BOUNDARY}\n")


def test_user_data_over_the_ec2_limit_is_rejected() -> None:
    with pytest.raises(UserDataError, match=str(MAX_USER_DATA_BYTES)):
        build_user_data(CLUSTER, extra_user_data="#!/bin/bash\n" + "# padding\n" * 2000, where="NodeClass big")


@pytest.mark.parametrize(
    ("labels", "taints", "message"),
    [
        ({"team": "a,evil=1"}, (), "value"),
        ({"team": "a\nspec: x"}, (), "value"),
        ({"te am": "a"}, (), "key"),
        ({"a=b": "c"}, (), "key"),
        ({"Bad_Prefix/x": "c"}, (), "prefix"),
        ({"x" * 64: "c"}, (), "key"),
        ({}, (Taint("k", "v,other=x", "NoSchedule"),), "value"),
        ({}, (Taint("k", "v", "Sometimes"),), "effect"),
        ({}, (Taint("k:x", "v", "NoSchedule"),), "key"),
    ],
)
def test_labels_and_taints_that_could_inject_flags_are_rejected(labels, taints, message) -> None:
    with pytest.raises(UserDataError, match=message):
        build_user_data(CLUSTER, labels=labels, taints=taints)


def test_bad_cluster_data_is_rejected() -> None:
    with pytest.raises(UserDataError, match="https"):
        node_config(ClusterBootstrap("c", "http://plain", "QUJD", "10.0.0.0/16"))
    with pytest.raises(UserDataError, match="certificateAuthority"):
        node_config(ClusterBootstrap("c", "https://x", "not base64!", "10.0.0.0/16"))


def test_labels_the_kubelet_refuses_are_left_for_registration() -> None:
    labels = {
        "node-role.kubernetes.io/worker": "",
        "example.k8s.io/x": "y",
        "kubernetes.io/custom": "z",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "node.kubernetes.io/custom": "ok",
        "joiner.dev/nodepool": "default",
    }
    flags = _flags(node_config(CLUSTER, labels=labels))
    assert flags["node-labels"] == (
        "joiner.dev/nodepool=default,node.kubernetes.io/custom=ok,node.kubernetes.io/instance-type=m5.large,topology.kubernetes.io/zone=us-east-1a"
    )
    assert not kubelet_may_set_label("node-role.kubernetes.io/worker")
    assert kubelet_may_set_label("kubelet.kubernetes.io/anything")
    assert kubelet_may_set_label("team")


def test_duplicate_taints_are_registered_once() -> None:
    flags = _flags(node_config(CLUSTER, taints=(Taint("a", "1"), Taint("a", "2"), Taint("a", "1", "NoExecute"))))
    assert flags["register-with-taints"] == "a=1:NoSchedule,a=1:NoExecute"


@pytest.mark.parametrize(
    ("milli", "resource", "expected"),
    [
        (100, "cpu", "100m"),
        (2000, "cpu", "2"),
        (1536 * 2**20 * 1000, "memory", "1536Mi"),
        (2 * 2**30 * 1000, "memory", "2Gi"),
        (1000 * 1000, "memory", "1000"),
        (1500, "memory", "1500m"),
        (3 * 2**30 * 1000, "ephemeral-storage", "3Gi"),
    ],
)
def test_quantities_are_exact(milli, resource, expected) -> None:
    assert format_exact_quantity(milli, resource) == expected
    assert Resources.parse({resource: expected})[resource] == milli


_label_text = st.text(alphabet=st.sampled_from("abcXYZ09-_.,=:/ \n\"'"), min_size=0, max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_label_text, _label_text, max_size=4))
def test_labels_round_trip_through_the_flag_or_are_rejected(labels: dict[str, str]) -> None:
    """Whatever the input, the kubelet flag parses back to exactly the labels given, or the
    build fails: no value can add, drop or alter another label."""
    try:
        document = node_config(CLUSTER, labels=labels)
    except UserDataError:
        return
    expected = {k: v for k, v in labels.items() if kubelet_may_set_label(k)}
    flag = _flags(document).get("node-labels", "") if document["spec"].get("kubelet") else ""
    parsed = dict(item.split("=", 1) for item in flag.split(",")) if flag else {}
    assert parsed == expected
    # And the YAML document is a faithful rendering.
    rendered = yaml.safe_load(parse_user_data(build_user_data(CLUSTER, labels=labels))[0].content)
    assert rendered == document
