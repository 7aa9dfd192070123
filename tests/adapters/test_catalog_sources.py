"""The catalog's AWS sources: DescribeInstanceTypes/Offerings against moto in several regions,
the Pricing API (which moto lacks) through botocore's Stubber."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.ec2 import Ec2Adapter
from joiner.adapters.pricing import PRICE_FILTERS, PricingAdapter
from joiner.domain import labels as wk
from joiner.domain.catalog_build import build_catalog, pricing_endpoint_region
from joiner.local.aws import fake_credentials
from joiner.ports import Ec2Error


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
    return json.dumps({
        "product": {"attributes": {"instanceType": name, "operatingSystem": "Linux"}},
        "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
    })


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
    stub.add_response("get_products", {"PriceList": [product("m5.large", "0.1070000000"), product("c5.large", "0.0000000000")],
                                       "NextToken": "page-2", "FormatVersion": "aws_v1"}, params)
    stub.add_response("get_products", {"PriceList": [product("r5.large", "0.1410000000"), json.dumps({"product": {"attributes": {}}})],
                                       "FormatVersion": "aws_v1"}, {**params, "NextToken": "page-2"})
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


@pytest.mark.parametrize(("region", "endpoint"), [
    ("us-east-1", "us-east-1"), ("us-west-2", "us-east-1"), ("eu-west-1", "eu-central-1"), ("ap-southeast-2", "ap-south-1"),
    ("ca-central-1", "us-east-1"), ("me-south-1", "eu-central-1"),
])
def test_pricing_client_is_built_in_an_endpoint_region(region: str, endpoint: str) -> None:
    assert pricing_endpoint_region(region) == endpoint
    with fake_credentials(region):
        assert AwsClients(region).pricing.meta.region_name == endpoint
