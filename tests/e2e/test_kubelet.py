"""The simulated kubelet registers what the instance's user data tells nodeadm."""

from __future__ import annotations

from joiner.domain.model import KubeletConfig, Taint
from joiner.domain.userdata import ClusterBootstrap, build_user_data, encode_user_data
from testworld.cluster import kubelet_registration


def test_labels_and_taints_come_from_the_launch_templates_user_data() -> None:
    bootstrap = ClusterBootstrap(name="demo", api_server_endpoint="https://example.invalid", certificate_authority="Q0E=", service_cidr="10.100.0.0/16")
    user_data = build_user_data(
        bootstrap,
        KubeletConfig(max_pods=17),
        {"joiner.dev/nodepool": "addons", "team": "infra"},
        [Taint("dedicated", "addons", "NoSchedule")],
        None,
    )
    boot = kubelet_registration(encode_user_data(user_data))
    assert boot.labels["joiner.dev/nodepool"] == "addons" and boot.labels["team"] == "infra"
    assert boot.taints == (Taint("dedicated", "addons", "NoSchedule"),)
    assert boot.kubelet.max_pods == 17


def test_absent_or_garbage_user_data_registers_a_bare_node() -> None:
    assert kubelet_registration(None).labels == {} and kubelet_registration("!!notbase64").taints == ()
