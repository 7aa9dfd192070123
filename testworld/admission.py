"""What a real API server does with a custom resource before it stores it: structural
OpenAPI v3 validation against the CRD's schema, defaulting, pruning of unknown fields, and
the schema's ``x-kubernetes-validations`` CEL rules (evaluated with cel-python).

Used by the local Kubernetes API emulator (tests and ``joiner demo``), so every object a test
or an example creates passes the same admission a cluster applies. Never imported by the
Lambda functions.

Covered: ``type`` (and ``x-kubernetes-int-or-string``, ``nullable``), ``properties``,
``additionalProperties``, ``required``, ``default``, ``enum``, ``pattern``, ``minLength`` /
``maxLength``, ``minimum`` / ``maximum`` (and the exclusive forms), ``minItems`` /
``maxItems``, ``minProperties`` / ``maxProperties``, ``x-kubernetes-list-type: set``,
``x-kubernetes-preserve-unknown-fields``, ``allOf``/``anyOf``/``oneOf``/``not`` (as
validation only), and CEL rules with ``self`` and, on updates, ``oldSelf`` (a rule naming
``oldSelf`` is a transition rule and is skipped on create, as the API server does).
Messages follow the API server's wording (``spec.x: Required value``,
``spec.x: Unsupported value: "a": supported values: "b", "c"``).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CrdSchema", "schemas_of"]

Cause = tuple[str, str]
_MISSING = object()


@functools.lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    import celpy

    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _describe(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str | int | float | bool) or value is None else f'"{_json_type(value)}"'


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null" if value is None else type(value).__name__


def _type_ok(schema: Mapping[str, Any], value: Any) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    wanted = schema.get("type")
    if wanted is None:
        return True
    actual = _json_type(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


class CrdSchema:
    """One served version's ``openAPIV3Schema``."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._pruned: list[str] = []

    def unknown_fields(self, obj: Mapping[str, Any]) -> list[str]:
        """The paths of the fields ``obj`` has that the schema does not declare (what pruning
        drops and strict field validation refuses), sorted as the API server reports them."""
        self._pruned = []
        try:
            self.admit(obj)
            return sorted(self._pruned)
        finally:
            self._pruned = []

    def admit(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[Cause]]:
        """The object with defaults applied and unknown fields pruned, and what is wrong with
        it (empty: admitted). ``metadata``, ``apiVersion`` and ``kind`` are the API server's own."""
        document = copy.deepcopy(dict(obj))
        causes: list[Cause] = []
        properties = self.schema.get("properties") or {}
        for key in list(document):
            if key in ("metadata", "apiVersion", "kind"):
                continue
            if key not in properties:
                if not self.schema.get("x-kubernetes-preserve-unknown-fields"):
                    del document[key]
                    self._pruned.append(key)
                continue
            document[key] = self._walk(properties[key], document[key], key, (old or {}).get(key, _MISSING), causes)
        for key, child in properties.items():
            if key in ("metadata", "apiVersion", "kind") or key in document:
                continue
            if "default" in child:
                document[key] = self._walk(child, copy.deepcopy(child["default"]), key, _MISSING, causes)
        for key in self.schema.get("required") or []:
            if key not in document:
                causes.append((key, "Required value"))
        return document, causes

    def _walk(self, schema: Mapping[str, Any], value: Any, path: str, old: Any, causes: list[Cause]) -> Any:
        if not _type_ok(schema, value):
            wanted = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
            causes.append((path, f'Invalid value: {_describe(value)}: {path} in body must be of type {wanted}: "{_json_type(value)}"'))
            return value
        if value is None:
            return value
        before = len(causes)
        if isinstance(value, Mapping) and not schema.get("x-kubernetes-int-or-string"):
            value = self._object(schema, dict(value), path, old if isinstance(old, Mapping) else _MISSING, causes)
        elif isinstance(value, list):
            value = self._array(schema, value, path, old if isinstance(old, list) else _MISSING, causes)
        else:
            self._scalar(schema, value, path, causes)
        for keyword in ("allOf", "anyOf", "oneOf", "not"):
            if keyword in schema:
                self._combinator(keyword, schema[keyword], value, path, causes)
        if len(causes) == before:
            self._rules(schema, value, path, old, causes)
        return value

    def _object(self, schema: Mapping[str, Any], value: dict[str, Any], path: str, old: Any, causes: list[Cause]) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key in list(value):
            child_path = f"{path}.{key}" if properties else f"{path}[{key}]"
            old_child = old.get(key, _MISSING) if isinstance(old, Mapping) else _MISSING
            if key in properties:
                value[key] = self._walk(properties[key], value[key], child_path, old_child, causes)
            elif isinstance(additional, Mapping):
                value[key] = self._walk(additional, value[key], child_path, old_child, causes)
            elif additional is True or preserve:
                continue
            elif properties or additional is False:
                del value[key]  # pruned, as the API server prunes unknown fields
                self._pruned.append(child_path)
        for key, child in properties.items():
            if key not in value and "default" in child:
                value[key] = self._walk(child, copy.deepcopy(child["default"]), f"{path}.{key}", _MISSING, causes)
        for key in schema.get("required") or []:
            if key not in value:
                causes.append((f"{path}.{key}", "Required value"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            causes.append((path, f"Invalid value: {len(value)}: {path} in body should have at least {schema['minProperties']} properties"))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            causes.append((path, f"Too many: {len(value)}: must have at most {schema['maxProperties']} items"))
        return value

    def _array(self, schema: Mapping[str, Any], value: list[Any], path: str, old: Any, causes: list[Cause]) -> list[Any]:
        items = schema.get("items")
        result = list(value)
        if isinstance(items, Mapping):
            for index, item in enumerate(result):
                old_item = old[index] if isinstance(old, list) and index < len(old) else _MISSING
                result[index] = self._walk(items, item, f"{path}[{index}]", old_item, causes)
        if "minItems" in schema and len(result) < schema["minItems"]:
            causes.append((path, f"Invalid value: {len(result)}: {path} in body should have at least {schema['minItems']} items"))
        if "maxItems" in schema and len(result) > schema["maxItems"]:
            causes.append((path, f"Too many: {len(result)}: must have at most {schema['maxItems']} items"))
        if schema.get("x-kubernetes-list-type") == "set":
            seen: set[str] = set()
            for index, item in enumerate(result):
                key = json.dumps(item, sort_keys=True)
                if key in seen:
                    causes.append((f"{path}[{index}]", f"Duplicate value: {_describe(item)}"))
                seen.add(key)
        return result

    def _scalar(self, schema: Mapping[str, Any], value: Any, path: str, causes: list[Cause]) -> None:
        if "enum" in schema and value not in schema["enum"]:
            supported = ", ".join(json.dumps(v) for v in schema["enum"])
            causes.append((path, f"Unsupported value: {_describe(value)}: supported values: {supported}"))
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                causes.append((path, f"Too long: may not be more than {schema['maxLength']} bytes"))
            if "minLength" in schema and len(value) < schema["minLength"]:
                causes.append((path, f"Invalid value: {_describe(value)}: {path} in body should be at least {schema['minLength']} chars long"))
            if "pattern" in schema and not _regex(schema["pattern"]).search(value):
                causes.append((path, f"Invalid value: {_describe(value)}: {path} in body should match '{schema['pattern']}'"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            minimum, maximum = schema.get("minimum"), schema.get("maximum")
            if minimum is not None and (value < minimum or (schema.get("exclusiveMinimum") and value == minimum)):
                causes.append((path, f"Invalid value: {value}: {path} in body should be greater than or equal to {minimum}"))
            if maximum is not None and (value > maximum or (schema.get("exclusiveMaximum") and value == maximum)):
                causes.append((path, f"Invalid value: {value}: {path} in body should be less than or equal to {maximum}"))

    def _combinator(self, keyword: str, schemas: Any, value: Any, path: str, causes: list[Cause]) -> None:
        def passes(sub: Mapping[str, Any]) -> bool:
            found: list[Cause] = []
            self._walk(sub, copy.deepcopy(value), path, _MISSING, found)
            return not found

        if keyword == "not":
            if passes(schemas):
                causes.append((path, f"Invalid value: {_describe(value)}: {path} in body must not match the 'not' schema"))
            return
        results = [passes(sub) for sub in schemas]
        if keyword == "allOf" and not all(results):
            causes.append((path, f"Invalid value: {_describe(value)}: {path} in body must match all schemas in allOf"))
        elif keyword == "anyOf" and not any(results):
            causes.append((path, f"Invalid value: {_describe(value)}: {path} in body must match at least one schema in anyOf"))
        elif keyword == "oneOf" and sum(results) != 1:
            causes.append((path, f"Invalid value: {_describe(value)}: {path} in body must match exactly one schema in oneOf"))

    def _rules(self, schema: Mapping[str, Any], value: Any, path: str, old: Any, causes: list[Cause]) -> None:
        rules: Sequence[Mapping[str, Any]] = schema.get("x-kubernetes-validations") or ()
        if not rules:
            return
        from celpy import celtypes
        from celpy.adapter import json_to_cel

        activation = {"self": json_to_cel(value)}
        if old is not _MISSING:
            activation["oldSelf"] = json_to_cel(old)
        for rule in rules:
            text = str(rule.get("rule", ""))
            if "oldSelf" in text and old is _MISSING:
                continue  # a transition rule: only on updates of an existing value
            try:
                outcome = _program(text).evaluate(activation)
            except Exception as error:  # noqa: BLE001 - cel-python raises its own types; the API server reports them
                causes.append((path, f"Invalid value: {_describe(value)}: rule {text!r} could not be evaluated: {error}"))
                continue
            if not (isinstance(outcome, celtypes.BoolType | bool) and bool(outcome)):
                message = str(rule.get("message") or f"failed rule: {text}")
                where = f"{path}{rule['fieldPath']}" if rule.get("fieldPath") else path
                causes.append((where, f"Invalid value: {_describe(value)}: {message}"))


def schemas_of(crd: Mapping[str, Any]) -> dict[str, CrdSchema]:
    """Served version name -> its schema, for a CustomResourceDefinition."""
    result: dict[str, CrdSchema] = {}
    for version in (crd.get("spec") or {}).get("versions") or []:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if version.get("served", True) and isinstance(schema, Mapping):
            result[str(version.get("name"))] = CrdSchema(schema)
    return result
