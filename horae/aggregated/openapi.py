"""The OpenAPI documents of runs.horae.dev/v1alpha1, so that `kubectl explain executions`
describes the resource (v3, what kubectl reads) and the API server's merged /openapi/v2
holds it too."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from horae.aggregated.resource import API_VERSION, GROUP, KIND, PHASES, PLURAL, VERSION

_GVK = [{"group": GROUP, "version": VERSION, "kind": KIND}]
_LIST_GVK = [{"group": GROUP, "version": VERSION, "kind": f"{KIND}List"}]
_PREFIX = "dev.horae.runs.v1alpha1"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def _string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


_STATUS_PROPERTIES: dict[str, Any] = {
    "phase": _string(
        "Where it stands, or how it ended: " + ", ".join(PHASES.values()) + ".",
        enum=list(PHASES.values()),
    ),
    "executionId": _string("Its id in Horae's store (`horae executions`, GET /executions/{id})."),
    "jobId": _string("Its job's id (a ScheduledJob's uid)."),
    "task": _string("The task its handler runs."),
    "attempt": {
        "type": "integer",
        "description": "Which attempt of its occurrence: 1, then one more per retry.",
    },
    "manual": {
        "type": "boolean",
        "description": "Its occurrence was run by hand (a trigger), not by the schedule.",
    },
    "backfill": _string("The backfill that ran this past occurrence, if one did."),
    "occurrenceAt": _string("The nominal time of the occurrence it runs.", format="date-time"),
    "dueAt": _string(
        "When it was due to start: the occurrence plus jitter, or a retry's backoff.",
        format="date-time",
    ),
    "startedAt": _string("When a worker started its handler.", format="date-time"),
    "finishedAt": _string("When it ended.", format="date-time"),
    "duration": _string("How long its handler ran, in seconds (e.g. 1.234s)."),
    "worker": _string("The worker that runs or last ran it."),
    "error": _string(
        "Why it failed, skipped or was cancelled: the error's kind, then its message, whole."
    ),
    "result": {
        "description": "What a Succeeded attempt's handler returned (JSON), up to 64 KiB.",
        "x-kubernetes-preserve-unknown-fields": True,
    },
}

_OBJECT_META = {
    "type": "object",
    "description": "Standard object metadata.",
    "properties": {
        "name": _string("Its ScheduledJob's name, then the first 16 hex digits of its id."),
        "namespace": _string("The namespace (Horae tenant) of its job."),
        "uid": _string("Its execution id."),
        "resourceVersion": _string("Its last change, in microseconds since the epoch."),
        "creationTimestamp": _string("When its row was created.", format="date-time"),
        "labels": {
            "type": "object",
            "description": "horae.dev/job: its job's name (its id for an unnamed API job).",
            "additionalProperties": {"type": "string"},
        },
    },
}
_LIST_META = {
    "type": "object",
    "description": "Standard list metadata.",
    "properties": {
        "resourceVersion": _string("When the list was read, in microseconds since the epoch."),
        "continue": _string("Set when more items follow: pass it as `continue` for them."),
    },
}


def _schemas(ref_prefix: str) -> dict[str, Any]:
    return {
        f"{_PREFIX}.{KIND}": {
            "type": "object",
            "description": "One run (attempt) of a job, read from Horae's store: read-only;"
            " change what runs through its ScheduledJob or Horae's job API.",
            "properties": {
                "apiVersion": _string(f"{API_VERSION}"),
                "kind": _string(KIND),
                "metadata": {"$ref": f"{ref_prefix}{_META}.ObjectMeta"},
                "status": {
                    "type": "object",
                    "description": "The execution as Horae's store records it.",
                    "properties": _STATUS_PROPERTIES,
                },
            },
            "x-kubernetes-group-version-kind": _GVK,
        },
        f"{_PREFIX}.{KIND}List": {
            "type": "object",
            "description": "Executions, in due order, paged with limit and continue.",
            "required": ["items"],
            "properties": {
                "apiVersion": _string(API_VERSION),
                "kind": _string(f"{KIND}List"),
                "metadata": {"$ref": f"{ref_prefix}{_META}.ListMeta"},
                "items": {
                    "type": "array",
                    "items": {"$ref": f"{ref_prefix}{_PREFIX}.{KIND}"},
                },
            },
            "x-kubernetes-group-version-kind": _LIST_GVK,
        },
        f"{_META}.ObjectMeta": _OBJECT_META,
        f"{_META}.ListMeta": _LIST_META,
    }


def _paths(ref_prefix: str, v3: bool) -> dict[str, Any]:
    def answer(schema: str) -> dict[str, Any]:
        ref = {"$ref": f"{ref_prefix}{_PREFIX}.{schema}"}
        if v3:
            return {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        return {"200": {"description": "OK", "schema": ref}}

    base = f"/apis/{GROUP}/{VERSION}"
    return {
        f"{base}/{PLURAL}": {
            "get": {
                "description": "list or watch executions of every namespace",
                "operationId": "listRunsHoraeDevV1alpha1ExecutionForAllNamespaces",
                "responses": answer(f"{KIND}List"),
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": _GVK[0],
            }
        },
        f"{base}/namespaces/{{namespace}}/{PLURAL}": {
            "get": {
                "description": "list or watch executions of a namespace",
                "operationId": "listRunsHoraeDevV1alpha1NamespacedExecution",
                "responses": answer(f"{KIND}List"),
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": _GVK[0],
            }
        },
        f"{base}/namespaces/{{namespace}}/{PLURAL}/{{name}}": {
            "get": {
                "description": "read an execution",
                "operationId": "readRunsHoraeDevV1alpha1NamespacedExecution",
                "responses": answer(KIND),
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": _GVK[0],
            }
        },
    }


V3: dict[str, Any] = {
    "openapi": "3.0.0",
    "info": {"title": "Horae executions", "version": VERSION},
    "paths": _paths("#/components/schemas/", v3=True),
    "components": {"schemas": _schemas("#/components/schemas/")},
}
V2: dict[str, Any] = {
    "swagger": "2.0",
    "info": {"title": "Horae executions", "version": VERSION},
    "paths": _paths("#/definitions/", v3=False),
    "definitions": _schemas("#/definitions/"),
}
V3_PATH = f"apis/{GROUP}/{VERSION}"
V3_HASH = hashlib.sha256(json.dumps(V3, sort_keys=True).encode()).hexdigest()[:32].upper()
V3_INDEX: dict[str, Any] = {
    "paths": {V3_PATH: {"serverRelativeURL": f"/openapi/v3/{V3_PATH}?hash={V3_HASH}"}}
}
