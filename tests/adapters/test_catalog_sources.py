"""The catalog's AWS sources: DescribeInstanceTypes/Offerings against moto in several regions,
the Pricing API (which moto lacks) through botocore's Stubber."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.ec2 import Ec2Adapter
from joiner.adapters.pricing import PRICE_FILTERS, PricingAdapter
from joiner.domain import labels as wk
from joiner.domain.catalog_build import build_catalog, partition_of, pricing_endpoint_region
from joiner.ports import Ec2Error
from testworld.aws import fake_credentials


class Clock:
    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", "ap-southeast-2"])
def test_instance_types_and_zones_of_a_region_build_its_catalog(region: str) -> None:
    with fake_credentials(region), mock_aws():
        ec2 = boto3.client("ec2", region_name=region)
        adapter = Ec2Adapter(ec2, None, None, "c", Clock())
        records = adapter.describe_instance_types()
        zones = adapter.instance_type_zones()
        expected_zones = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    names = [r["InstanceType"] for r in records]
    assert len(names) == len(set(names)) > 500  # every page read, none twice
    assert set(zones["m5.large"]) <= set(expected_zones) and zones["m5.large"]
    assert all(zone.startswith(region) for found in zones.values() for zone in found)
    catalog = build_catalog(region, records, zones, {"m5.large": 0.1}, {})
    assert catalog.region == region
    assert catalog.instance_type("m5.large").requirements.labels()[wk.REGION] == region
    assert {o.zone for o in catalog.offerings("m5.large")} == set(zones["m5.large"])


def product(name: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": name, "operatingSystem": "Linux"}},
            "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
        }
    )


def expected_filters(region: str) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}] + [
        {"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in PRICE_FILTERS
    ]


def stubbed_pricing() -> tuple[Any, Stubber]:
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_on_demand_prices_are_read_page_by_page_with_karpenters_filters() -> None:
    client, stub = stubbed_pricing()
    params = {"ServiceCode": "AmazonEC2", "Filters": expected_filters("eu-west-1"), "FormatVersion": "aws_v1", "MaxResults": ANY}
    stub.add_response(
        "get_products",
        {"PriceList": [product("m5.large", "0.1070000000"), product("c5.large", "0.0000000000")], "NextToken": "page-2", "FormatVersion": "aws_v1"},
        params,
    )
    stub.add_response(
        "get_products",
        {"PriceList": [product("r5.large", "0.1410000000"), json.dumps({"product": {"attributes": {}}})], "FormatVersion": "aws_v1"},
        {**params, "NextToken": "page-2"},
    )
    with stub:
        prices = PricingAdapter(client).on_demand_prices("eu-west-1")
        stub.assert_no_pending_responses()
    # A zero price (free tier / reserved placeholders) and a product with no type are skipped.
    assert prices == {"m5.large": 0.107, "r5.large": 0.141}


def test_pricing_errors_are_reported_with_their_code() -> None:
    client, stub = stubbed_pricing()
    stub.add_client_error("get_products", service_error_code="AccessDeniedException", service_message="not authorized", http_status_code=400)
    with stub, pytest.raises(Ec2Error) as raised:
        PricingAdapter(client).on_demand_prices("eu-west-1")
    assert raised.value.code == "AccessDeniedException"


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("us-east-1", "us-east-1"),
        ("us-west-2", "us-east-1"),
        ("eu-west-1", "eu-central-1"),
        ("ap-southeast-2", "ap-south-1"),
        ("ca-central-1", "us-east-1"),
        ("me-south-1", "eu-central-1"),
    ],
)
def test_pricing_client_is_built_in_an_endpoint_region(region: str, endpoint: str) -> None:
    assert pricing_endpoint_region(region) == endpoint
    with fake_credentials(region):
        assert AwsClients(region).pricing.meta.region_name == endpoint


# ---------------------------------------------------------------- partitions

_REGION_WORDS = st.sampled_from(["north", "south", "east", "west", "central", "northwest", "southeast", "northeast"])


def _region(prefix: str) -> st.SearchStrategy[str]:
    return st.builds(lambda word, number: f"{prefix}{word}-{number}", _REGION_WORDS, st.integers(1, 9))


@given(
    st.one_of(_region("us-"), _region("eu-"), _region("ap-"), _region("sa-"), _region("ca-"), _region("me-"), _region("af-"), _region("il-"), _region("mx-"))
)
def test_the_commercial_partition_uses_one_of_its_three_pricing_endpoints(region: str) -> None:
    assert partition_of(region) == "aws"
    assert pricing_endpoint_region(region) in ("us-east-1", "eu-central-1", "ap-south-1")


@given(_region("cn-"))
def test_china_regions_use_the_china_pricing_endpoint(region: str) -> None:
    assert partition_of(region) == "aws-cn"
    assert pricing_endpoint_region(region) == "cn-northwest-1"


@given(st.one_of(_region("us-gov-"), _region("us-iso-"), _region("us-isob-"), _region("eu-isoe-"), _region("us-isof-")))
def test_partitions_without_a_pricing_api_get_no_endpoint(region: str) -> None:
    assert partition_of(region) != "aws"
    assert pricing_endpoint_region(region) is None


def test_pricing_clients_stay_in_their_partition() -> None:
    with fake_credentials("cn-north-1"):
        assert AwsClients("cn-north-1").pricing.meta.region_name == "cn-northwest-1"
    with fake_credentials("us-gov-west-1"), pytest.raises(LookupError, match="aws-us-gov"):
        AwsClients("us-gov-west-1").pricing  # noqa: B018 - the property builds the client


def test_a_region_without_a_pricing_api_is_priced_from_the_bundled_table_without_calling_it(caplog: Any) -> None:
    """GovCloud: no Pricing client is built (it would reach a commercial endpoint with GovCloud
    credentials); the catalog says its prices are approximate and the log says why."""
    from joiner.services.context import Runtime
    from joiner.settings import Settings

    runtime = Runtime(settings=Settings(cluster_name="c", region="us-gov-west-1", state_table="s", idempotency_table="i"))
    with caplog.at_level("WARNING"):
        assert runtime._pricing_if_served() is None
    assert runtime.pricing_port is None
    assert any("Price List" in record.getMessage() for record in caplog.records)
    commercial = Runtime(settings=Settings(cluster_name="c", region="eu-west-1", state_table="s", idempotency_table="i"), pricing_port=PricingAdapter(None))
    assert commercial._pricing_if_served() is commercial.pricing_port
