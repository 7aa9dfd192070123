"""Pure domain logic: no boto3, kubernetes or powertools imports, deterministic, injected clock."""
