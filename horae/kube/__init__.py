"""Kubernetes API access for Horae's components: the client, Leases, custom objects,
reviews, Events, Deployments and ServiceAccounts, one module per adapter.

Every request goes through `calling.call`: on a worker thread (the official client is
synchronous), with its timeout from `calling`, 404 read as "gone" (None or False) where an
object may be gone, and no retries. API errors are translated at this boundary: 409 on a
Lease -> `LeaseConflict`, on a custom object's versioned write -> `ObjectChanged`. What
belongs elsewhere: decisions about what to write (the scheduler's shard ownership, the
operator's reconcile) live in the components.

The names below are the package's surface; components import them from `horae.kube`.
"""

from horae.errors import LeaseConflict, ObjectChanged
from horae.kube.calling import load_api_client
from horae.kube.custom_objects import CustomObjects
from horae.kube.deployments import DeploymentReplicas, Deployments
from horae.kube.events import Events
from horae.kube.front_proxy import FrontProxy, front_proxy
from horae.kube.leases import Lease, Leases
from horae.kube.reviews import ReviewedUser, Reviews
from horae.kube.service_accounts import ServiceAccounts
from horae.kube.singleton import SingletonLease
from horae.kube.watching import watch_leases

__all__ = [
    "CustomObjects",
    "DeploymentReplicas",
    "Deployments",
    "Events",
    "FrontProxy",
    "Lease",
    "LeaseConflict",
    "Leases",
    "ObjectChanged",
    "ReviewedUser",
    "Reviews",
    "ServiceAccounts",
    "SingletonLease",
    "front_proxy",
    "load_api_client",
    "watch_leases",
]
