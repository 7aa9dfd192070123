"""AL2023 variant per instance type (standard / NVIDIA / Neuron) and its SSM parameter."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.amis import (
    NEURON,
    NVIDIA,
    PUBLISHED,
    STANDARD,
    AmiError,
    al2023_parameter,
    ami_key,
    node_variant,
    parse_alias,
    variant_of,
    variant_of_labels,
)
from joiner.domain.catalog import load_bundled_catalog
from joiner.domain.model import Node


@pytest.fixture(scope="module")
def catalog_types():  # type: ignore[no-untyped-def]
    """The shipped us-east-1 catalog, as planning sees it (real GPU and accelerator labels)."""
    return {t.name: t for t in load_bundled_catalog().instance_types()}


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        ("m5.large", STANDARD),
        ("c7g.large", STANDARD),
        ("g5.xlarge", NVIDIA),
        ("p4d.24xlarge", NVIDIA),
        ("g5g.xlarge", NVIDIA),  # g5g: NVIDIA T4G on arm64
        ("inf2.xlarge", NEURON),
        ("trn1.2xlarge", NEURON),
    ],
)
def test_variant_follows_the_instance_types_accelerators(catalog_types, name: str, variant: str) -> None:  # type: ignore[no-untyped-def]
    assert variant_of(catalog_types[name]) == variant


def test_every_catalog_gpu_or_neuron_type_gets_an_accelerated_variant(catalog_types) -> None:  # type: ignore[no-untyped-def]
    for name, instance_type in catalog_types.items():
        nvidia = instance_type.capacity.get("nvidia.com/gpu", 0) > 0
        neuron = instance_type.capacity.get("aws.amazon.com/neuron", 0) > 0
        expected = NVIDIA if nvidia else NEURON if neuron else STANDARD
        assert variant_of(instance_type) == expected, name


def test_karpenter_label_keys_count_like_joiners() -> None:
    assert variant_of_labels({"karpenter.k8s.aws/instance-gpu-count": "4"}) == NVIDIA  # maker unstated: NVIDIA, as Karpenter
    assert variant_of_labels({"karpenter.k8s.aws/instance-gpu-count": "1", "karpenter.k8s.aws/instance-gpu-manufacturer": "amd"}) == STANDARD
    assert variant_of_labels({wk.INSTANCE_ACCELERATOR_COUNT: "1", wk.INSTANCE_ACCELERATOR_MANUFACTURER: "aws"}) == NEURON
    assert variant_of_labels({wk.INSTANCE_ACCELERATOR_COUNT: "1", wk.INSTANCE_ACCELERATOR_MANUFACTURER: "habana"}) == STANDARD
    assert variant_of_labels({wk.INSTANCE_GPU_COUNT: "0"}) == STANDARD


def test_a_node_is_judged_by_its_labels_else_its_type(catalog_types) -> None:  # type: ignore[no-untyped-def]
    labelled = Node("gpu", labels={wk.INSTANCE_TYPE: "m5.large", wk.INSTANCE_GPU_COUNT: "1", wk.INSTANCE_GPU_MANUFACTURER: "nvidia"})
    assert node_variant(labelled, catalog_types) == NVIDIA  # what the node says wins
    assert node_variant(Node("bare", labels={wk.INSTANCE_TYPE: "g5.xlarge"}), catalog_types) == NVIDIA
    assert node_variant(Node("unknown", labels={wk.INSTANCE_TYPE: "x9.huge"}), catalog_types) == STANDARD


@pytest.mark.parametrize(
    ("arch", "variant", "release", "path"),
    [
        ("amd64", STANDARD, "latest", "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"),
        ("amd64", NVIDIA, "latest", "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id"),
        ("arm64", NVIDIA, "latest", "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id"),
        ("amd64", NEURON, "latest", "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id"),
        (
            "amd64",
            NEURON,
            "v20240807",
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/amazon-eks-node-al2023-x86_64-neuron-1.31-v20240807/image_id",
        ),
    ],
)
def test_parameter_paths(arch: str, variant: str, release: str, path: str) -> None:
    assert al2023_parameter("1.31", arch, variant, release) == path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("1.31", "arm64", NEURON), "no AL2023 neuron AMI for arm64"),
        (("1.31", "s390x", STANDARD), "architecture 's390x'"),
        (("latest", "amd64", STANDARD), "must look like 1.31"),
        (("1.31", "amd64", "gpu"), "no AL2023 gpu AMI"),
        (("1.31", "amd64", STANDARD, "v1.20.0"), "latest or vYYYYMMDD"),
    ],
)
def test_unpublished_parameters_are_refused(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(AmiError, match=message):
        al2023_parameter(*args)


@pytest.mark.parametrize("alias", ["al2023@latest", "al2023@v20240807"])
def test_supported_aliases(alias: str) -> None:
    assert parse_alias(alias) == alias.split("@")[1]


@pytest.mark.parametrize("alias", ["bottlerocket@latest", "al2@latest", "al2023@v1.2", "al2023", "AL2023@latest", "al2023@latest "])
def test_other_aliases_are_refused(alias: str) -> None:
    with pytest.raises(AmiError, match="not supported"):
        parse_alias(alias)


@given(st.sampled_from(["amd64", "arm64"]), st.sampled_from([STANDARD, NVIDIA, NEURON]))
def test_ami_keys_are_distinct_per_arch_and_variant(arch: str, variant: str) -> None:
    key = ami_key(arch, variant)
    assert (key == arch) == (variant == STANDARD)
    others = {ami_key(a, v) for a in ("amd64", "arm64") for v in (STANDARD, NVIDIA, NEURON) if (a, v) != (arch, variant)}
    assert key not in others


@pytest.fixture(scope="module")
def ami_grant() -> str:
    from infra.access import EKS_AMI_PARAMETERS  # imports CDK: once per module

    return EKS_AMI_PARAMETERS


@given(
    minor=st.integers(min_value=23, max_value=40),
    published=st.sampled_from(PUBLISHED),
    release=st.one_of(st.just("latest"), st.dates(min_value=date(2023, 1, 1), max_value=date(2099, 12, 31)).map(lambda d: f"v{d:%Y%m%d}")),
)
def test_the_iam_grant_covers_every_parameter_read_and_nothing_else(ami_grant: str, minor: int, published: tuple[str, str], release: str) -> None:
    """infra/access.py grants ssm:GetParameter on exactly the AL2023 parameters this module names."""
    from tests.support.iam_policy import resource_matches

    grant = f"arn:aws:ssm:us-east-1::parameter/{ami_grant}"
    arch, variant = published
    path = al2023_parameter(f"1.{minor}", arch, variant, release)
    assert resource_matches(grant, f"arn:aws:ssm:us-east-1::parameter{path}")
    for other in (
        f"/aws/service/eks/optimized-ami/1.{minor}/amazon-linux-2/recommended/image_id",
        f"/aws/service/bottlerocket/aws-k8s-1.{minor}/x86_64/latest/image_id",
    ):
        assert not resource_matches(grant, f"arn:aws:ssm:us-east-1::parameter{other}")
