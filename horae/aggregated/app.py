"""The HTTP side of the aggregated API: discovery, OpenAPI, and get, list and watch of
executions, answered from the store as the Kubernetes API machinery answers them (Lists,
server-side Tables, watch events, `metav1.Status` errors), so that kubectl and client
libraries need nothing special.

Read-only: a write answers 405 naming what to change instead. Every resource request
carries the front-proxy identity (auth.py) and is authorised by a SubjectAccessReview.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from horae import metrics
from horae.aggregated import openapi
from horae.aggregated.auth import Authorizer, Unauthenticated, identity
from horae.aggregated.resource import (
    API_VERSION,
    CATEGORIES,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    BadRequest,
    ContinueToken,
    Expired,
    Selection,
    decode_continue,
    encode_continue,
    execution,
    job_label,
    micros,
    name_of,
    parse_name,
    select,
    table,
    version_of,
)
from horae.errors import StoreError
from horae.kube import FrontProxy, ReviewedUser
from horae.store import views
from horae.store.groups import Store
from horae.store.rows import ExecutionRow

log = logging.getLogger(__name__)

PAGE_MOST = 5000
"""The most executions one page holds, whatever `limit` asks."""
UNPAGED_MOST = 100_000
"""A list without `limit` stops after this many, with a continue token for the rest."""
WATCH_POLL = 0.5
"""Seconds between a watch's reads of the store."""
WATCH_LOOKBACK = timedelta(minutes=2)
"""A watch sees an execution end when it was seen live, or when it was due this recently."""
WATCH_OVERLAP = timedelta(seconds=5)
"""Each read of a watch looks this far before the previous one (commits land late)."""
WATCH_MOST_SECONDS = 1800
"""The longest a watch runs before the client watches again (timeoutSeconds may ask less)."""
TABLE_ACCEPT = "as=table"
READ_ONLY = (
    f"{PLURAL}.{GROUP} are read-only: Horae's store writes them as jobs run. Change what"
    " runs through the ScheduledJob (horae.dev/v1alpha1) that runs them (`kubectl edit`,"
    " suspend, delete, the horae.dev/trigger annotation), or through Horae's job API and CLI"
    " (`horae jobs trigger|pause|cancel`, POST /jobs/{id}:trigger, POST /executions/{id}:rerun)."
)


@dataclass(frozen=True)
class ViewSettings:
    continue_ttl: timedelta = timedelta(minutes=15)
    """HORAE_CONTINUE_TTL_SECONDS: a continue token older than this answers 410 Expired."""


def status(code: int, reason: str, message: str, **details: Any) -> JSONResponse:
    """A metav1.Status failure, as the API server answers errors."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=code)


def _wants_table(request: Request) -> bool:
    accept = request.headers.get("accept", "").lower().replace(" ", "")
    first = accept.split(",")[0]
    return TABLE_ACCEPT in first and "g=meta.k8s.io" in first


class ExecutionsView:
    """Executions of the store as runs.horae.dev resources."""

    def __init__(
        self,
        store: Store,
        proxy: FrontProxy,
        authorizer: Authorizer,
        settings: ViewSettings | None = None,
    ) -> None:
        self._store = store
        self._proxy = proxy
        self._authorizer = authorizer
        self._settings = settings or ViewSettings()
        self._names: dict[uuid.UUID, str | None] = {}

    # Who ----------------------------------------------------------------------------

    def _user(self, request: Request) -> ReviewedUser:
        return identity(request.scope["headers"], request.scope.get("horae.client_cn"), self._proxy)

    async def _authorised(
        self, request: Request, verb: str, namespace: str | None
    ) -> ReviewedUser | Response:
        try:
            user = self._user(request)
        except Unauthenticated as exc:
            return status(401, "Unauthorized", f"Unauthorized: {exc}")
        if await self._authorizer.allowed(user, verb=verb, namespace=namespace):
            return user
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        return status(
            403,
            "Forbidden",
            f'{PLURAL}.{GROUP} is forbidden: User "{user.username}" cannot {verb} resource'
            f' "{PLURAL}" in API group "{GROUP}"{where}',
            group=GROUP,
            kind=PLURAL,
        )

    # Rows -> objects -----------------------------------------------------------------

    async def _named(self, rows: Iterable[ExecutionRow]) -> list[tuple[ExecutionRow, str | None]]:
        rows = list(rows)
        unknown = {r.job_id for r in rows} - set(self._names)
        if unknown:
            if len(self._names) > 100_000:
                self._names.clear()
            found = await views.job_names(self._store, unknown)
            for job_id in unknown:
                self._names[job_id] = found.get(job_id)
        return [(r, self._names.get(r.job_id)) for r in rows]

    async def _jobs(self, namespace: str | None, selection: Selection) -> list[uuid.UUID] | None:
        """The job ids `selection` limits the answer to (None: any job)."""
        if selection.jobs is None:
            return None
        ids: set[uuid.UUID] = set()
        names = set()
        for label in selection.jobs:
            try:
                ids.add(uuid.UUID(label))
            except ValueError:
                names.add(label)
        if names:
            ids |= set(await views.jobs_named(self._store, namespace, names))
        return sorted(ids)

    @staticmethod
    def _admits(selection: Selection, row: ExecutionRow, job_name: str | None) -> bool:
        if selection.nothing:
            return False
        if not selection.admits_job(job_label(row.job_id, job_name)):
            return False
        if selection.statuses is not None and row.status not in selection.statuses:
            return False
        return selection.name is None or name_of(row, job_name) == selection.name

    # Handlers ------------------------------------------------------------------------

    async def collection(self, request: Request) -> Response:
        started = time.monotonic()
        watch = request.query_params.get("watch", "").lower() in ("1", "true")
        verb = "write" if request.method != "GET" else "watch" if watch else "list"
        response = await self._collection(request, verb)
        _observe(verb, response, started)
        return response

    async def _collection(self, request: Request, verb: str) -> Response:
        namespace = request.path_params.get("namespace")
        if verb == "write":
            return status(405, "MethodNotAllowed", READ_ONLY)
        params = request.query_params
        watch = verb == "watch"
        allowed = await self._authorised(request, verb, namespace)
        if isinstance(allowed, Response):
            return allowed
        try:
            selection = select(params.get("labelSelector"), params.get("fieldSelector"), namespace)
            if watch:
                return await self._watch(request, namespace, selection)
            return await self._list(request, namespace, selection)
        except BadRequest as exc:
            return status(400, "BadRequest", str(exc))
        except Expired as exc:
            return status(410, "Expired", str(exc))
        except StoreError as exc:
            log.warning("store read failed", extra={"error": str(exc)})
            return status(503, "ServiceUnavailable", f"Horae's store is unavailable: {exc}")

    async def _list(
        self, request: Request, namespace: str | None, selection: Selection
    ) -> Response:
        params = request.query_params
        now = await views.clock(self._store)
        version = micros(now)
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            raise BadRequest(f"limit: not an integer: {params.get('limit')!r}") from None
        if limit < 0:
            raise BadRequest("limit: must not be negative")
        after: views.Position | None = None
        started = version
        if params.get("continue"):
            position = decode_continue(
                params["continue"],
                now=version,
                ttl_micros=int(self._settings.continue_ttl.total_seconds() * 1_000_000),
            )
            after = (position.namespace, position.due_at, position.id)
            started = position.started
        rows, more = await self._select(namespace, selection, after, limit)
        meta: dict[str, Any] = {"resourceVersion": str(started)}
        if more and rows:
            last = rows[-1][0]
            meta["continue"] = encode_continue(
                ContinueToken(
                    namespace=last.tenant, due_at=last.due_at, id=last.id, started=started
                )
            )
        if _wants_table(request):
            include = params.get("includeObject") or "Metadata"
            return JSONResponse(table(rows, now=datetime.now(UTC), include=include, list_meta=meta))
        return JSONResponse(
            {
                "apiVersion": API_VERSION,
                "kind": f"{KIND}List",
                "metadata": meta,
                "items": [execution(r, n) for r, n in rows],
            }
        )

    async def _select(
        self,
        namespace: str | None,
        selection: Selection,
        after: views.Position | None,
        limit: int,
    ) -> tuple[list[tuple[ExecutionRow, str | None]], bool]:
        """Up to `limit` (0: up to UNPAGED_MOST) rows the selection admits, after `after`,
        and whether more may follow."""
        if selection.nothing:
            return [], False
        if selection.name is not None:
            found = [
                (r, n)
                for r, n in await self._by_name(namespace, selection.name)
                if self._admits(selection, r, n)
                and (after is None or (r.tenant, r.due_at, r.id) > after)
            ]
            return found, False
        jobs = await self._jobs(namespace, selection)
        if jobs == []:
            return [], False
        want = min(limit, PAGE_MOST) if limit else UNPAGED_MOST
        out: list[tuple[ExecutionRow, str | None]] = []
        more = True
        while more and len(out) < want:
            page = await views.page(
                self._store,
                namespace,
                jobs=jobs,
                statuses=selection.statuses,
                after=after,
                limit=min(want - len(out), PAGE_MOST),
            )
            more = page.more
            if not page.rows:
                break
            last = page.rows[-1]
            after = (last.tenant, last.due_at, last.id)
            out += [
                (r, n) for r, n in await self._named(page.rows) if self._admits(selection, r, n)
            ]
        return out[:want], more or len(out) > want

    async def _by_name(
        self, namespace: str | None, name: str
    ) -> list[tuple[ExecutionRow, str | None]]:
        parsed = parse_name(name)
        if parsed is None or namespace is None:
            return []
        rows = await views.by_id_range(self._store, namespace, parsed.low, parsed.high)
        return [(r, n) for r, n in await self._named(rows) if name_of(r, n) == name]

    async def item(self, request: Request) -> Response:
        started = time.monotonic()
        verb = "get" if request.method == "GET" else "write"
        response = await self._item(request)
        _observe(verb, response, started)
        return response

    async def _item(self, request: Request) -> Response:
        namespace = request.path_params["namespace"]
        name = request.path_params["name"]
        if request.method != "GET":
            return status(405, "MethodNotAllowed", READ_ONLY, name=name, group=GROUP, kind=PLURAL)
        allowed = await self._authorised(request, "get", namespace)
        if isinstance(allowed, Response):
            return allowed
        try:
            found = await self._by_name(namespace, name)
        except StoreError as exc:
            return status(503, "ServiceUnavailable", f"Horae's store is unavailable: {exc}")
        if not found:
            return status(
                404,
                "NotFound",
                f'{PLURAL}.{GROUP} "{name}" not found',
                name=name,
                group=GROUP,
                kind=PLURAL,
            )
        row, job_name = found[0]
        if _wants_table(request):
            include = request.query_params.get("includeObject") or "Metadata"
            return JSONResponse(
                table(
                    [(row, job_name)],
                    now=datetime.now(UTC),
                    include=include,
                    list_meta={"resourceVersion": str(version_of(row))},
                )
            )
        return JSONResponse(execution(row, job_name))

    # Watch ---------------------------------------------------------------------------

    async def _watch(
        self, request: Request, namespace: str | None, selection: Selection
    ) -> Response:
        params = request.query_params
        if namespace is None:
            raise BadRequest(
                "watch of every namespace is not served: watch one namespace (-n NAMESPACE),"
                " or one job in it (-l horae.dev/job=NAME)"
            )
        if params.get("sendInitialEvents", "").lower() == "true":
            raise BadRequest("sendInitialEvents is not supported: list, then watch")
        raw = params.get("resourceVersion") or "0"
        try:
            since = int(raw)
        except ValueError:
            raise BadRequest(f"resourceVersion: not one this server wrote: {raw!r}") from None
        if since == 0:
            since = micros(await views.clock(self._store))
        try:
            timeout = min(
                int(params.get("timeoutSeconds") or WATCH_MOST_SECONDS), WATCH_MOST_SECONDS
            )
        except ValueError:
            raise BadRequest("timeoutSeconds: not an integer") from None
        if selection.name is not None:  # one execution: only its job's rows are read
            parsed = parse_name(selection.name)
            named = frozenset({parsed.job}) if parsed else frozenset[str]()
            selection = replace(
                selection, jobs=named if selection.jobs is None else selection.jobs & named
            )
        jobs = await self._jobs(namespace, selection)
        as_table = _wants_table(request)
        include = params.get("includeObject") or "Metadata"
        events = self._events(namespace, selection, jobs, since, timeout)

        async def body() -> AsyncIterator[bytes]:
            metrics.aggregated_watches.inc()
            try:
                async for kind, row, job_name in events:
                    if as_table:
                        obj = table([(row, job_name)], now=datetime.now(UTC), include=include)
                    else:
                        obj = execution(row, job_name)
                    metrics.aggregated_watch_events.inc()
                    yield (
                        json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()
                        + b"\n"
                    )
            finally:
                metrics.aggregated_watches.dec()

        return StreamingResponse(body(), media_type="application/json")

    async def _events(
        self,
        namespace: str,
        selection: Selection,
        jobs: Sequence[uuid.UUID] | None,
        since: int,
        timeout: int,
    ) -> AsyncIterator[tuple[str, ExecutionRow, str | None]]:
        """ADDED for an execution created after `since`, MODIFIED for a change of one
        older, each change once, in the order they happened, until `timeout` seconds."""
        if selection.nothing or jobs == []:
            await asyncio.sleep(timeout)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        shown: dict[uuid.UUID, int] = {}
        live: dict[uuid.UUID, ExecutionRow] = {}
        cursor = since
        while loop.time() < deadline:
            now = await views.clock(self._store)
            current = await views.live(self._store, namespace, jobs)
            current_ids = {r.id for r in current}
            gone = [i for i in live if i not in current_ids]
            left = await views.by_ids(self._store, namespace, gone) if gone else []
            ended_after = datetime.fromtimestamp(cursor / 1e6, UTC) - WATCH_OVERLAP
            ended = await views.ended_since(
                self._store,
                namespace,
                jobs,
                due_from=min(now - WATCH_LOOKBACK, ended_after),
                ended_after=ended_after,
            )
            changed = {r.id: r for r in [*ended, *left, *current]}
            for row, job_name in sorted(
                await self._named(changed.values()), key=lambda p: version_of(p[0])
            ):
                version = version_of(row)
                if version <= since or shown.get(row.id, 0) >= version:
                    continue
                shown[row.id] = version
                if not self._admits(selection, row, job_name):
                    continue
                yield ("ADDED" if micros(row.created_at) > since else "MODIFIED"), row, job_name
            live = {r.id: r for r in current}
            cursor = micros(now)
            floor = cursor - int((WATCH_OVERLAP + WATCH_LOOKBACK).total_seconds() * 1e6)
            shown = {i: v for i, v in shown.items() if v >= floor or i in live}
            await asyncio.sleep(min(WATCH_POLL, max(0.0, deadline - loop.time())))


def _observe(verb: str, response: Response, started: float) -> None:
    metrics.aggregated_requests.labels(verb, str(response.status_code)).inc()
    if verb != "write":
        metrics.aggregated_latency.labels(verb).observe(time.monotonic() - started)


# Discovery ----------------------------------------------------------------------------

_GROUP_VERSION = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
API_GROUP = {
    "kind": "APIGroup",
    "apiVersion": "v1",
    "name": GROUP,
    "versions": [_GROUP_VERSION],
    "preferredVersion": _GROUP_VERSION,
}
API_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": f"{GROUP}/{VERSION}",
    "resources": [
        {
            "name": PLURAL,
            "singularName": SINGULAR,
            "namespaced": True,
            "kind": KIND,
            "verbs": ["get", "list", "watch"],
            "shortNames": list(SHORT_NAMES),
            "categories": list(CATEGORIES),
        }
    ],
}


def _static(body: dict[str, Any]) -> Any:
    async def answer(_: Request) -> Response:
        return JSONResponse(body)

    return answer


async def _ok(_: Request) -> Response:
    return Response("ok", media_type="text/plain")


def application(view: ExecutionsView) -> Starlette:
    base = f"/apis/{GROUP}/{VERSION}"
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            Route(
                "/apis",
                _static({"kind": "APIGroupList", "apiVersion": "v1", "groups": [API_GROUP]}),
            ),
            Route(f"/apis/{GROUP}", _static(API_GROUP)),
            Route(base, _static(API_RESOURCES)),
            Route("/openapi/v2", _static(openapi.V2)),
            Route("/openapi/v3", _static(openapi.V3_INDEX)),
            Route(f"/openapi/v3/{openapi.V3_PATH}", _static(openapi.V3)),
            Route("/healthz", _ok),
            Route("/livez", _ok),
            Route("/readyz", _ok),
            Route(f"{base}/{PLURAL}", view.collection, methods=methods),
            Route(f"{base}/namespaces/{{namespace}}/{PLURAL}", view.collection, methods=methods),
            Route(f"{base}/namespaces/{{namespace}}/{PLURAL}/{{name}}", view.item, methods=methods),
        ]
    )


__all__ = ["ExecutionsView", "ViewSettings", "application"]
