"""A validation error as a field path and a message, spelt the way each entry point
names its input."""

from __future__ import annotations

from datetime import datetime

import pydantic
import pytest
from pydantic.alias_generators import to_camel

from horae.domain.fields import field_path, first_error
from horae.models import JobSpec


def error_of(**fields: object) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as info:
        JobSpec.model_validate(fields)
    return info.value


def test_the_first_error_names_its_field_and_keeps_pydantics_words() -> None:
    error = first_error(error_of(task="t", cron="* * * * *", retry={"max_attempts": 0}))
    assert error.loc == ("retry", "max_attempts")
    assert error.path() == "retry.max_attempts"
    assert error.top == "retry"
    assert error.message == "Input should be greater than or equal to 1"


def test_a_validators_message_is_read_without_pydantics_prefix() -> None:
    error = first_error(error_of(task="t", run_at=datetime(2030, 1, 1)))
    assert error.message.startswith("Value error, needs a UTC offset")
    assert error.reason.startswith("needs a UTC offset")


def test_a_path_is_spelt_and_placed_as_the_caller_names_its_fields() -> None:
    error = first_error(error_of(task="t", cron="* * * * *", time_zone="Mars/Olympus"))
    assert error.path(spell=to_camel, under="spec") == "spec.timeZone"


def test_an_error_of_the_whole_model_is_named_by_the_callers_default() -> None:
    error = first_error(error_of(task="t"))
    assert error.loc == () and error.top == ""
    assert error.path() == "body"
    assert error.path(default="cron") == "cron"
    assert error.path(under="spec") == "spec"


def test_list_indexes_are_part_of_the_path() -> None:
    assert field_path(["jobs", 3, "run_at"]) == "jobs.3.run_at"
