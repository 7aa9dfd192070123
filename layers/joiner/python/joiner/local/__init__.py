"""Local stand-ins for the cloud and the cluster, used by tests and ``joiner demo``.

Nothing here is imported by the Lambda functions; modules in this package may depend on
development-only packages (kmock, aiohttp).
"""
