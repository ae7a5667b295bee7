"""The pieces Horae's CRD schemas are built from that check a value at `kubectl apply`:
cron fields as RE2 patterns in CEL rules, the bounds of instants, integer ranges, and the
status conditions array. `horae.resources` assembles them into the CRDs."""

from __future__ import annotations

from typing import Any, NamedTuple

from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS

from horae.domain.instants import EARLIEST_INSTANT, LATEST_INSTANT, rfc3339

_CRON_FIELD = r"[0-9A-Za-z*/,#?-]+"
# The shape: 5 or 6 fields, or a macro (each field's values: CRON_FIELDS).
CRON_SHAPE = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + rf"{_CRON_FIELD}( +{_CRON_FIELD}){{4,5}})$"
)

TIME_ZONE_SHAPE = r"^(UTC|[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2})$"


def _cron_field(number: str, stepped: str = "", plain: str = "") -> str:
    """An RE2 pattern (case-insensitive, as cron is) for a comma list of one field's
    items: `*`, a number or a range (or a `stepped` form), with an optional step; or a
    `plain` form. Never stricter than cronsim, which the operator and the API use."""
    base = rf"\*|{number}(?:-{number})?" + (f"|{stepped}" if stepped else "")
    item = rf"(?:(?:{base})(?:/0*[1-9][0-9]*)?" + (f"|{plain}" if plain else "") + ")"
    return rf"(?i)^{item}(?:,{item})*$"


_MONTHS = "|".join(SYMBOLIC_MONTHS)
_DAYS = "|".join(SYMBOLIC_DAYS)


class CronField(NamedTuple):
    pattern: str
    """The field's allowed values, as an RE2 pattern."""
    allowed: str
    """The same, as the message of a value out of range says it."""


CRON_FIELDS = {
    "second": CronField(_cron_field(r"0*[1-5]?[0-9]"), "0-59"),
    "minute": CronField(_cron_field(r"0*[1-5]?[0-9]"), "0-59"),
    "hour": CronField(_cron_field(r"0*(?:2[0-3]|1?[0-9])"), "0-23"),
    "day-of-month": CronField(
        _cron_field(r"0*(?:3[01]|[12][0-9]|[1-9])", stepped="LW|L"), "1-31, L or LW"
    ),
    "month": CronField(_cron_field(rf"(?:0*(?:1[0-2]|[1-9])|{_MONTHS})"), "1-12 or JAN-DEC"),
    "day-of-week": CronField(
        _cron_field(rf"(?:0*[0-7]|{_DAYS})", plain=rf"0*[0-7]L|(?:0*[0-7]|{_DAYS})#0*[1-5]"),
        "0-7 or SUN-SAT, nL or n#1-5",
    ),
}
"""Each cron field's allowed values, checked by CEL at `kubectl apply` (field by field,
so the message names the one that is out of range)."""


def cron_rules() -> list[dict[str, str]]:
    """One CEL rule per cron field: fields counted from the end (a sixth, first, field is
    seconds); a macro is left to the shape pattern."""
    fields = "self.split(' ').filter(f, f != '')"
    rules = []
    for back, (name, cron_field) in enumerate(reversed(CRON_FIELDS.items())):
        pattern = cron_field.pattern.replace("\\", "\\\\")
        field = f"{fields}[size({fields}) - {back + 1}]"
        guard = f"self.startsWith('@') || size({fields}) < {back + 1}"
        rules.append(
            {
                "rule": f"{guard} || {field}.matches('{pattern}')",
                "message": f"the {name} field must be {cron_field.allowed}",
            }
        )
    return rules


def instant_rule(field: str) -> dict[str, str]:
    """CEL: the instant within the bounds every entry point applies (`check_instant`)."""
    earliest, latest = rfc3339(EARLIEST_INSTANT), rfc3339(LATEST_INSTANT)
    return {
        "rule": f"timestamp(self) >= timestamp('{earliest}') && "
        f"timestamp(self) < timestamp('{latest}')",
        "message": f"{field} must be from {earliest} to before {latest}",
    }


def integer(minimum: int, maximum: int, description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


CONDITION_REASON = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""A condition's reason: CamelCase, as metav1.Condition's schema has it."""


def conditions_schema(types: str) -> dict[str, Any]:
    """A resource's `status.conditions`: metav1.Condition's schema (the one controller-gen
    writes), one entry per type; `types` says which types the resource has."""

    def text(description: str, **bounds: Any) -> dict[str, Any]:
        return {"type": "string", "description": description, **bounds}

    return {
        "type": "array",
        "description": f"The resource's state, one condition per type: {types}",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": text("The condition's type, in CamelCase.", maxLength=316),
                "status": text("True, False or Unknown.", enum=["True", "False", "Unknown"]),
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                    "description": "The metadata.generation it was set from: below the"
                    " resource's, it may be out of date.",
                },
                "lastTransitionTime": text(
                    "When the condition last changed status (not when it was last written).",
                    format="date-time",
                ),
                "reason": text(
                    "Why it has its status, in one CamelCase word.",
                    minLength=1,
                    maxLength=1024,
                    pattern=CONDITION_REASON,
                ),
                "message": text("The reason, in words (may be empty).", maxLength=32768),
            },
        },
    }
