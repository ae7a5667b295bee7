"""Driver errors leave the store as Horae's, with the driver's as their cause."""

from __future__ import annotations

import asyncpg
import pytest

from horae.errors import (
    Conflict,
    HoraeError,
    StoreError,
    StoreUnavailable,
    TransactionAborted,
)
from horae.store.boundary import translate, translated, translating


@pytest.mark.parametrize(
    ("raised", "becomes"),
    [
        (ConnectionRefusedError("refused"), StoreUnavailable),
        (TimeoutError(), StoreUnavailable),
        (asyncpg.InternalClientError("cannot switch to state 15"), StoreUnavailable),
        (asyncpg.ConnectionDoesNotExistError("closed in the middle"), StoreUnavailable),
        (asyncpg.AdminShutdownError("terminating connection"), StoreUnavailable),
        (asyncpg.CannotConnectNowError("the database system is starting up"), StoreUnavailable),
        (asyncpg.TooManyConnectionsError("too many clients"), StoreUnavailable),
        (asyncpg.InterfaceError("another operation is in progress"), StoreUnavailable),
        (asyncpg.DeadlockDetectedError("deadlock detected"), TransactionAborted),
        (asyncpg.UniqueViolationError("duplicate key"), StoreError),
        (asyncpg.DataError("out of range"), StoreError),
    ],
)
def test_each_driver_error_becomes_its_kind_of_store_error(
    raised: Exception, becomes: type[StoreError]
) -> None:
    translated_error = translate(raised)
    assert type(translated_error) is becomes


def test_horaes_own_errors_and_bugs_pass_untouched() -> None:
    assert translate(Conflict("taken")) is None
    assert translate(ValueError("a bug")) is None
    assert translate(KeyError("a bug")) is None


async def test_a_store_function_raises_horaes_error_caused_by_the_drivers() -> None:
    cut = asyncpg.InternalClientError("cannot switch to state 12")

    @translated
    async def read() -> None:
        raise cut

    with pytest.raises(StoreUnavailable) as caught:
        await read()
    assert caught.value.__cause__ is cut


async def test_a_connection_scope_translates_what_its_block_raises() -> None:
    with pytest.raises(TransactionAborted):
        async with translating():
            raise asyncpg.DeadlockDetectedError("deadlock detected")
    with pytest.raises(Conflict):  # already Horae's: as it was
        async with translating():
            raise Conflict("taken")
    assert issubclass(StoreError, HoraeError)
