"""JSON files checked against a JSON Schema before use (jsonschema): one short reason, never
the whole value (a 15,000-word vocabulary or a forged record would fill the screen)."""

from __future__ import annotations

from typing import Any

# The names a user knows from JSON, for the Python types json.load gives.
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def schema_problem(data: Any, schema: dict[str, Any]) -> str | None:
    """What is wrong with ``data`` under ``schema``, as ``where: what`` in a few words (the
    first error jsonschema's best_match picks), or None when it is valid."""
    import jsonschema  # type: ignore[import-untyped,unused-ignore]

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(data)
    )
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the file"
    instance = error.instance
    if error.validator == "type":  # its message would quote the whole value
        found = _JSON_TYPES.get(type(instance), type(instance).__name__)
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return f"{where}: expected {wanted}, found {found}"
    if error.validator in ("maximum", "minimum", "const", "enum", "minLength"):
        shown = repr(instance)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        if error.validator == "maximum":
            return f"{where}: {shown} is above the largest allowed, {error.validator_value}"
        if error.validator == "minimum":
            return f"{where}: {shown} is below the smallest allowed, {error.validator_value}"
        return f"{where}: {shown} is not allowed ({error.validator}: {error.validator_value!r})"
    return f"{where}: {error.message[:120]}"
