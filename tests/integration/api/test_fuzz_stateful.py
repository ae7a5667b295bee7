"""Stateful schemathesis over a real `horae api` process: sequences of create (single and
batch) -> get/edit/pause/resume/trigger/cancel on the jobs they created, chained through
OpenAPI links. After every call: no 5xx, the response conforms to the document, a refused
request left PostgreSQL exactly as it was, and the rows keep their invariants (no orphan
or stale pending executions)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

from tests.integration.api.conftest import FUZZ_TOKEN

CREATE = "create_jobs_post"
BATCH = "create_batch_jobs_batch_post"
TRIGGER = "trigger_jobs__job_id__trigger_post"
ON_A_JOB = [
    "get_job_jobs__job_id__get",
    "patch_job_jobs__job_id__patch",
    "pause_jobs__job_id__pause_post",
    "resume_jobs__job_id__resume_post",
    TRIGGER,
    "job_executions_jobs__job_id__executions_get",
    "delete_job_jobs__job_id__delete",
]

# Valid and invalid values mixed, so that creates mostly succeed (the stateless test covers
# arbitrary strings) while edits and a few creates are refused.
CRONS = ["*/5 * * * *", "0 9 * * 1-5", "30 2 * * *", "*/10 * * * * *", "@hourly", "61 * * * *"]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Mars/Base"]

SNAPSHOT = """
SELECT (SELECT coalesce(json_agg(j ORDER BY j.id)::text, '') FROM jobs j),
       (SELECT coalesce(json_agg(e ORDER BY e.id)::text, '') FROM executions e),
       (SELECT coalesce(json_agg(t ORDER BY t.name)::text, '') FROM tenants t)
"""

INVARIANTS = {
    "an execution without its job": """
        SELECT e.id FROM executions e LEFT JOIN jobs j ON j.id = e.job_id WHERE j.id IS NULL""",
    "a pending execution of a job that is not active": """
        SELECT e.id FROM executions e JOIN jobs j ON j.id = e.job_id
        WHERE e.status IN ('scheduled', 'queued') AND j.state <> 'active'""",
    "a pending execution of an old spec version": """
        SELECT e.id FROM executions e JOIN jobs j ON j.id = e.job_id
        WHERE e.status = 'scheduled' AND e.job_version <> j.spec_version""",
    "an active job with nothing scheduled (nothing runs here, so nothing was consumed)": """
        SELECT j.id FROM jobs j WHERE j.state = 'active' AND NOT EXISTS (
            SELECT 1 FROM executions e WHERE e.job_id = j.id AND e.status = 'scheduled')""",
    "a cron job with two pending executions of one occurrence": """
        SELECT e.job_id FROM executions e WHERE e.status = 'scheduled'
        GROUP BY e.job_id, e.occurrence_at, e.attempt HAVING count(*) > 1""",
    "an execution in another tenant than its job": """
        SELECT e.id FROM executions e JOIN jobs j ON j.id = e.job_id WHERE e.tenant <> j.tenant""",
}


def _link(operation_id: str, parameter: str, source: str) -> dict[str, Any]:
    return {"operationId": operation_id, "parameters": {parameter: source}}


def linked_document(raw: dict[str, Any]) -> dict[str, Any]:
    """The API's own document plus the OpenAPI links between its operations, and create
    bodies drawn from a mix of valid and invalid schedules."""
    doc = copy.deepcopy(raw)
    ops = {o["operationId"]: o for path in doc["paths"].values() for o in path.values()}
    ops[CREATE]["responses"]["201"]["links"] = {
        op: _link(op, "job_id", "$response.body#/id") for op in ON_A_JOB
    }
    ops[BATCH]["responses"]["201"]["links"] = {
        op: _link(op, "job_id", "$response.body#/ids/0") for op in ON_A_JOB
    }
    ops[TRIGGER]["responses"]["201"]["links"] = {
        "execution": _link("get_execution_executions__execution_id__get", "execution_id",
                           "$response.body#/id"),
    }  # fmt: skip
    for op in (ops[CREATE], ops[BATCH]):
        for parameter in op.get("parameters", []):
            if parameter["name"] == "Horae-Tenant":
                parameter["schema"] = {"type": "string", "enum": ["fuzz"]}
    # An edit to a cron job that sets run_at alone is refused (one of the two, never both),
    # and a random time zone is unknown: left open, the edits were refused so often that
    # whole rounds went by without one being accepted.
    for body, optional in (("JobCreate", False), ("JobPatch", True)):
        job = doc["components"]["schemas"][body]["properties"]
        job["cron"] = {"anyOf": [{"type": "string", "enum": CRONS}, {"type": "null"}]}
        zone = {"type": "string", "enum": ZONES}
        job["time_zone"] = {"anyOf": [zone, {"type": "null"}]} if optional else zone
        job["run_at"] = {"type": "null"}  # a one-off is a cron job's simpler case: cron only
        job["payload"] = {"type": "object", "maxProperties": 3}
    return doc


class Database:
    """A private connection on its own loop: the state machine's steps are synchronous."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection = self._loop.run_until_complete(asyncpg.connect(url))

    def snapshot(self) -> tuple[str, ...]:
        row = self._loop.run_until_complete(self._conn.fetchrow(SNAPSHOT))
        return tuple(row)

    def reset(self) -> None:
        """Each scenario starts empty, so that Hypothesis can replay one to shrink it."""
        self._loop.run_until_complete(self._conn.execute("TRUNCATE executions, jobs, tenants"))

    def violations(self) -> dict[str, list[Any]]:
        found = {}
        for what, query in INVARIANTS.items():
            rows = self._loop.run_until_complete(self._conn.fetch(query))
            if rows:
                found[what] = [r[0] for r in rows]
        return found

    def close(self) -> None:
        self._loop.run_until_complete(self._conn.close())
        self._loop.close()


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    yield db
    db.close()


def test_no_call_sequence_fails_breaks_the_schema_or_writes_partially(
    api_url: str, database: Database
) -> None:
    raw = httpx.get(f"{api_url}/openapi.json").json()
    schema = schemathesis.openapi.from_dict(linked_document(raw))
    schema.config.update(base_url=api_url)
    seen: dict[str, int] = {}
    failures: list[str] = []

    class Jobs(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            database.reset()

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": {"Authorization": f"Bearer {FUZZ_TOKEN}"}}

        def before_call(self, case: Any) -> None:
            # Act in the token's tenant (another tenant is a 403, covered by test_auth).
            if case.headers is not None and "Horae-Tenant" in case.headers:
                case.headers["Horae-Tenant"] = "fuzz"
            self._before = database.snapshot()

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            key = f"{case.operation.method.upper()} {case.operation.path} {response.status_code}"
            seen[key] = seen.get(key, 0) + 1
            # DELETE keeps the job (cancelled, with its history), so GET after DELETE is 200
            # by design; semantic rules make some schema-valid bodies a 422.
            try:
                case.validate_response(
                    response, transport_kwargs=kwargs or None,
                    excluded_checks=[checks.use_after_free, checks.positive_data_acceptance],
                    recorder=getattr(self, "recorder", None),
                )  # fmt: skip
                if response.status_code >= 400:
                    assert database.snapshot() == self._before, (
                        f"{key} was refused but changed the database: {case.body!r}"
                    )
                assert not database.violations(), (key, case.body, database.violations())
            except Exception as exc:  # shown even when Hypothesis cannot replay the scenario
                failures.append(f"{key}: {exc}\n{case.as_curl_command()}")
                raise

    # The sequences must reach the transitions, not only refusals. A batch is accepted only
    # when every job in it passes the cross-field rules the schema cannot express (one of
    # run_at and cron, retry intervals in order), so few generated batches are: the
    # derandomized first round does not always reach one (it depends on the ids and times
    # the responses carry), and up to two random rounds more are run until every
    # transition was reached. Every round checks every response.
    transitions = ("POST /jobs", "POST /jobs:batch", "PATCH /jobs/{job_id}",
                   "POST /jobs/{job_id}:pause", "POST /jobs/{job_id}:resume",
                   "DELETE /jobs/{job_id}")  # fmt: skip
    for round_ in range(3):
        try:
            Jobs.run(settings=settings(max_examples=80, stateful_step_count=10, deadline=None,
                                       database=None, derandomize=round_ == 0,
                                       suppress_health_check=list(HealthCheck)))  # fmt: skip
        finally:
            print("\n\n".join(failures[:3]))
        reached = {key.rsplit(" ", 1)[0] for key, _ in seen.items() if key[-3:-2] == "2"}
        print(sorted(seen.items()))
        if all(operation in reached for operation in transitions):
            break
    for operation in transitions:
        assert operation in reached, (operation, sorted(seen.items()))
