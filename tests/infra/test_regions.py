"""One cluster name, two regions, one account: the stacks' account-wide names must differ."""

from __future__ import annotations

from typing import Any

from infra.config import created_node_role_name

#: Resource types whose names are global to the account (IAM), with their name properties.
GLOBAL_NAMES = {
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::InstanceProfile": "InstanceProfileName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::IAM::User": "UserName",
    "AWS::IAM::Group": "GroupName",
}


def global_names(template: dict[str, Any]) -> list[str]:
    names = []
    for resource in template["Resources"].values():
        name_property = GLOBAL_NAMES.get(resource["Type"])
        if name_property is not None and name_property in resource.get("Properties", {}):
            name = resource["Properties"][name_property]
            assert isinstance(name, str), f"a region-specific stack names {resource['Type']} with a token: {name}"
            names.append(name)
    return names


def test_two_regions_of_one_cluster_synthesize_with_distinct_account_wide_names(tmp_path) -> None:
    from aws_cdk import App

    from infra.config import JoinerConfig
    from infra.stack import JoinerStack
    from infra.synth import SKIP_BUNDLING, cdk_json_context

    app = App(context={**cdk_json_context(), **SKIP_BUNDLING}, outdir=str(tmp_path))
    for region in ("us-east-1", "eu-west-1"):
        JoinerStack(app, f"Joiner-demo-{region}", config=JoinerConfig(cluster_name="demo", region=region))
    assembly = app.synth()
    names = {stack.environment.region: global_names(stack.template) for stack in assembly.stacks}
    # the role and its instance profile
    assert names == {region: [f"JoinerNodeRole-demo-{region}"] * 2 for region in ("us-east-1", "eu-west-1")}
    assert not set(names["us-east-1"]) & set(names["eu-west-1"])


def test_long_cluster_names_keep_their_role_names_apart_within_iams_64_characters() -> None:
    long_a, long_b = "a" * 90 + "-one", "a" * 90 + "-two"
    for region in ("us-east-1", "ap-southeast-5", "us-isof-south-1"):
        first, second = created_node_role_name(long_a, region), created_node_role_name(long_b, region)
        assert first != second and len(first) <= 64 and len(second) <= 64 and first.endswith(region)
    assert created_node_role_name("prod", "eu-west-1") == "JoinerNodeRole-prod-eu-west-1"
