"""Adapters wrapping EC2, Kubernetes and DynamoDB behind small typing.Protocol ports."""
