"""On-demand prices from the AWS Price List Query API (``pricing:GetProducts``).

Implements :class:`joiner.ports.PricingPort`. The API is served only from us-east-1,
eu-central-1 and ap-south-1 (:func:`joiner.domain.catalog_build.pricing_endpoint_region`
picks the client's region); it answers for every region. The filters are Karpenter's: Linux,
shared tenancy, no pre-installed software, capacity status "Used", on-demand.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from joiner.domain.catalog_build import on_demand_price_from_product
from joiner.ports import Ec2Error

__all__ = ["PRICE_FILTERS", "PricingAdapter"]

PRICE_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("marketoption", "OnDemand"),
)
#: Pages read at most (a region has about 1,000 matching products, 100 per page).
MAX_PAGES = 50


class PricingAdapter:
    """:class:`joiner.ports.PricingPort` over a boto3 ``pricing`` client."""

    def __init__(self, pricing: Any) -> None:
        self._pricing = pricing

    def on_demand_prices(self, region: str) -> dict[str, float]:
        """USD per hour by instance type; the lowest when products disagree (none should).
        Raises :class:`Ec2Error` (code = the AWS error code) when the API cannot be read."""
        filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
        filters += [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in PRICE_FILTERS]
        prices: dict[str, float] = {}
        try:
            pages = self._pricing.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2",
                Filters=filters,
                FormatVersion="aws_v1",
                PaginationConfig={"PageSize": 100, "MaxItems": 100 * MAX_PAGES},
            )
            for page in pages:
                for product in page.get("PriceList", []):
                    parsed = on_demand_price_from_product(product)
                    if parsed is not None:
                        name, price = parsed
                        prices[name] = min(price, prices.get(name, price))
        except ClientError as error:
            info = error.response.get("Error", {})
            code = str(info.get("Code", "Unknown"))
            raise Ec2Error(f"pricing GetProducts failed: {code}: {info.get('Message', '')}", code=code) from error
        except BotoCoreError as error:
            raise Ec2Error(f"pricing GetProducts failed: {error}", code=type(error).__name__) from error
        except ValueError as error:  # a PriceList entry that is not JSON
            raise Ec2Error(f"pricing GetProducts answered malformed products: {error}", code="Malformed") from error
        return dict(sorted(prices.items()))
