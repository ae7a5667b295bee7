"""Token handling against the real kube-apiserver: audiences, what the caches are keyed
by, and a flood of made-up tokens."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from horae.api.app import create_app
from horae.api.auth import Caller, KubernetesAuth, ReviewLimits
from horae.kube import ReviewedUser, Reviews, load_api_client
from tests.integration.api.conftest import Tenants, bearer
from tests.support.kube import ControlPlane
from tests.support.wait import until


class CountedReviews(Reviews):
    """The real reviews, counted by token (what the API server was asked)."""

    def __init__(self, kubeconfig: Path, *, audiences: tuple[str, ...] = ()) -> None:
        super().__init__(load_api_client(str(kubeconfig)), audiences=audiences)
        self.tokens: Counter[str] = Counter()

    async def token(self, token: str) -> ReviewedUser | None:
        self.tokens[token] += 1
        return await super().token(token)


@pytest_asyncio.fixture
async def reviews(component_kubeconfigs: dict[str, Path]) -> CountedReviews:
    return CountedReviews(component_kubeconfigs["api"])


async def _client(db_url: str, auth: KubernetesAuth) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(dsn=db_url, auth=auth, pool_size=4)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://horae") as client:
            yield client


@pytest_asyncio.fixture
async def counted_api(db_url: str, reviews: CountedReviews) -> AsyncIterator[httpx.AsyncClient]:
    limits = ReviewLimits(reviews_per_second=50)
    async for client in _client(db_url, KubernetesAuth(reviews, limits)):
        yield client


async def test_a_flood_of_made_up_tokens_neither_evicts_a_good_one_nor_reviews_each(
    counted_api: httpx.AsyncClient, reviews: CountedReviews, tenants: Tenants
) -> None:
    # 20,000 distinct bad tokens: each was a TokenReview, and the cache was cleared whole
    # at 10,000 entries, so a good token was reviewed again (and again).
    good = bearer(tenants.alice)
    assert (await counted_api.get("/jobs", headers=good)).status_code == 200
    started = time.monotonic()
    answers: Counter[int] = Counter()
    for wave in range(20):
        bad = [counted_api.get("/jobs", headers=bearer(f"made-up-{wave}-{i}")) for i in range(1000)]
        *refused, mine = await asyncio.gather(*bad, counted_api.get("/jobs", headers=good))
        assert mine.status_code == 200, mine.text
        answers.update(r.status_code for r in refused)
        for r in refused:
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1"
                assert r.headers["content-type"] == "application/problem+json"
    elapsed = time.monotonic() - started
    assert set(answers) <= {401, 503} and sum(answers.values()) == 20_000, answers
    assert reviews.tokens[tenants.alice] == 1, "the good token was reviewed again"
    bad_reviews = sum(reviews.tokens.values()) - 1
    assert bad_reviews <= 50 + 50 * elapsed + 1, (bad_reviews, elapsed)
    assert answers[401] == bad_reviews
    # Once the flood stops, a token never seen before is reviewed and admitted again.
    new = bearer(tenants.bob)

    async def admitted() -> bool:
        return (await counted_api.get("/jobs", headers=new)).status_code == 200

    await until(admitted, timeout=10, what="a new good token admitted after the flood")


async def test_an_access_answer_is_never_served_to_an_identity_with_other_groups(
    control_plane: ControlPlane, reviews: CountedReviews, tenants: Tenants
) -> None:
    # The SubjectAccessReview cache was keyed by uid, verb, resource and tenant: the same
    # uid with other groups (what another authenticator may report for it) got the first
    # identity's answer.
    group = f"horae-admins-{tenants.b}"
    control_plane.kubectl(
        "create",
        "rolebinding",
        "group-admins",
        "-n",
        tenants.b,
        "--clusterrole=horae-jobs-editor",
        f"--group={group}",
    )
    auth = KubernetesAuth(reviews)
    alice = await auth.caller(tenants.alice)
    assert alice is not None and alice.user is not None
    assert not await auth.allowed(alice, "create", "jobs", tenants.b)
    user = alice.user
    admin = ReviewedUser(user.username, user.uid, (*user.groups, group), user.extra)
    assert await auth.allowed(
        Caller(alice.name, alice.default_tenant, user=admin), "create", "jobs", tenants.b
    )
    extra = ReviewedUser(user.username, user.uid, user.groups, {"scopes": ["x"]})
    assert not await auth.allowed(
        Caller(alice.name, alice.default_tenant, user=extra), "create", "jobs", tenants.b
    )


async def test_with_an_audience_only_tokens_meant_for_horae_are_accepted(
    db_url: str,
    control_plane: ControlPlane,
    component_kubeconfigs: dict[str, Path],
    tenants: Tenants,
) -> None:
    # A token for the Kubernetes API (the default audience) was enough to call Horae.
    def token(*audience: str) -> str:
        return control_plane.kubectl(
            "create", "token", "alice", "-n", tenants.a, *audience
        ).stdout.strip()

    for_horae, for_kubernetes = token("--audience=horae.dev"), token()
    reviews = CountedReviews(component_kubeconfigs["api"], audiences=("horae.dev",))
    async for api in _client(db_url, KubernetesAuth(reviews)):
        assert (await api.get("/jobs", headers=bearer(for_horae))).status_code == 200
        assert (await api.get("/jobs", headers=bearer(for_kubernetes))).status_code == 401
    # Without one (the default), the API server's own audience: existing tokens still work.
    async for api in _client(db_url, KubernetesAuth(CountedReviews(component_kubeconfigs["api"]))):
        assert (await api.get("/jobs", headers=bearer(for_kubernetes))).status_code == 200
        assert (await api.get("/jobs", headers=bearer(for_horae))).status_code == 401
