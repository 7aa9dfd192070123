"""Joiner: a serverless, event-driven node autoscaler for Amazon EKS."""

__version__ = "0.1.0"
