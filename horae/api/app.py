"""The FastAPI application: lifespan (pool), body limits, error translation, probes, metrics."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from horae.api import metering, problems
from horae.api.auth import Authenticator, Chain, KubernetesAuth, ReviewLimits, StaticTokens
from horae.api.deps import Services
from horae.api.gate import BodyLimits, Gate
from horae.api.problems import Problem, problem_response
from horae.api.routes import build_router
from horae.config import Settings
from horae.errors import ConfigError, StoreUnavailable
from horae.kube import Reviews, load_api_client
from horae.store.groups import Store

log = logging.getLogger(__name__)


async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
    cause = exc.__cause__ if isinstance(exc, StoreUnavailable) and exc.__cause__ else exc
    log.warning("database unavailable: %s", type(cause).__name__)
    return problem_response(
        Problem(
            503,
            "Unavailable",
            "the job store is unavailable; nothing was written",
            headers={"Retry-After": "1"},
        )
    )


def create_app(
    *,
    dsn: str,
    auth: Authenticator,
    pool_size: int = 10,
    limits: BodyLimits | None = None,
    liveness_stall: float = 30.0,
) -> FastAPI:
    services = Services(auth=auth)
    heartbeats = metering.Heartbeats(stall_after=liveness_stall)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.groups = store = await Store.open(dsn, size=pool_size)
        stop = asyncio.Event()
        following = asyncio.create_task(store.follow(stop), name="follow-catalog")
        beat = asyncio.create_task(heartbeats.beat(store.pool_use), name="beat")
        log.info("job API ready (pid %d; store groups %s)", os.getpid(), store.describe())
        try:
            yield
        finally:
            stop.set()
            following.cancel()
            beat.cancel()
            await asyncio.gather(following, beat, return_exceptions=True)
            await store.close()

    app = FastAPI(
        title="Horae job API",
        version="v1",
        description="Register and manage timed jobs; inspect their executions. Errors are "
        "application/problem+json naming the offending field.",
        lifespan=lifespan,
    )
    problems.install(app)
    for unavailable in (StoreUnavailable, ConnectionError, OSError):
        app.add_exception_handler(unavailable, _database_unavailable)
    app.state.services = services
    app.include_router(build_router())

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        # Answered on the event loop: a hung loop leaves it unanswered; with several
        # server processes, also 503 once any other's loop stopped turning (metering.py).
        ok, detail = heartbeats.liveness()
        body = {"status": "ok" if ok else "unavailable", "detail": detail}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        try:
            await services.store().home.ping()
        except Exception:
            return JSONResponse({"status": "unready"}, status_code=503)
        return JSONResponse({"status": "ready"})

    app.add_api_route("/metrics", metering.metrics_endpoint(), include_in_schema=False)
    # Authentication and body limits before the application reads any body (gate.py).
    app.add_middleware(Gate, auth=auth, limits=limits or BodyLimits())
    app.add_middleware(metering.RequestMetrics)  # outermost: the gate's refusals count
    return app


@dataclass(frozen=True)
class AuthPlan:
    """Which authenticators the API runs with, decided from its settings alone."""

    tokens_file: str | None
    """HORAE_API_TOKENS_FILE: static `token,tenant[,verbs]` lines (local development)."""
    kubernetes: bool
    """Kubernetes TokenReview and SubjectAccessReview."""
    audiences: tuple[str, ...] = ()
    """HORAE_API_AUDIENCE: comma-separated audiences a caller's token must be meant for;
    unset: the API server's own (any ServiceAccount token accepted by the cluster)."""
    limits: ReviewLimits = field(default_factory=ReviewLimits)
    """HORAE_API_TOKEN_REVIEWS_PER_SECOND among them."""

    def describe(self) -> str:
        active = []
        if self.tokens_file:
            active.append(f"static tokens from {self.tokens_file} (local development only)")
        if self.kubernetes:
            audiences = f" (audiences {', '.join(self.audiences)})" if self.audiences else ""
            active.append(f"Kubernetes TokenReview + SubjectAccessReview{audiences}")
        return "authenticators: " + ", ".join(active)


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{name}: must be > 0, got {raw!r}")
    return value


def auth_plan(env: Mapping[str, str]) -> AuthPlan:
    """HORAE_API_KUBERNETES_AUTH: `true` (Kubernetes authentication required), `false` (off),
    unset: on when there is a cluster to ask (KUBECONFIG, or running in a pod), off
    otherwise. ConfigError when no authenticator at all would be active, or when
    Kubernetes authentication is required with no cluster to ask."""
    tokens_file = env.get("HORAE_API_TOKENS_FILE") or None
    if tokens_file is not None and not Path(tokens_file).is_file():
        raise ConfigError(f"HORAE_API_TOKENS_FILE: no such file: {tokens_file}")
    raw = env.get("HORAE_API_KUBERNETES_AUTH", "").strip().lower()
    if raw not in ("", "true", "false"):
        raise ConfigError(f"HORAE_API_KUBERNETES_AUTH: expected true or false, got {raw!r}")
    cluster = bool(env.get("KUBECONFIG") or env.get("KUBERNETES_SERVICE_HOST"))
    if raw == "true" and not cluster:
        raise ConfigError(
            "HORAE_API_KUBERNETES_AUTH=true: no cluster to ask (set KUBECONFIG, or run in a pod)"
        )
    audiences = tuple(a.strip() for a in env.get("HORAE_API_AUDIENCE", "").split(",") if a.strip())
    rate = _positive(env, "HORAE_API_TOKEN_REVIEWS_PER_SECOND", ReviewLimits.reviews_per_second)
    plan = AuthPlan(
        tokens_file,
        kubernetes=raw == "true" or (raw == "" and cluster),
        audiences=audiences,
        limits=ReviewLimits(reviews_per_second=rate),
    )
    if not plan.tokens_file and not plan.kubernetes:
        raise ConfigError(
            "no authenticator: run in a cluster or set KUBECONFIG (Kubernetes tokens), or set"
            " HORAE_API_TOKENS_FILE (local development)"
        )
    return plan


def authenticator(settings: Settings, plan: AuthPlan) -> Authenticator:
    chain: list[Authenticator] = []
    if plan.tokens_file:
        chain.append(StaticTokens(Path(plan.tokens_file)))
    if plan.kubernetes:
        reviews = Reviews(load_api_client(settings.kube.kubeconfig), audiences=plan.audiences)
        chain.append(KubernetesAuth(reviews, plan.limits))
    return Chain(*chain)


def app_from_env() -> FastAPI:
    """The uvicorn factory: settings from HORAE_* at the entry point."""
    from horae import logs

    logs.setup(os.environ.get("HORAE_LOG_LEVEL", "INFO"))
    settings = Settings.from_env()
    plan = auth_plan(os.environ)
    log.info("job API %s", plan.describe())
    return create_app(
        dsn=settings.database.url,
        auth=authenticator(settings, plan),
        pool_size=settings.database.pool_size,
        liveness_stall=settings.liveness_stall.total_seconds(),
    )
