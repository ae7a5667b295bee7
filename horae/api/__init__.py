"""The HTTP job API (FastAPI): routes, problem+json errors, authentication per tenant,
request metrics and liveness over its server processes (`metering`).

Owns request validation and the mapping of HTTP onto the store's lifecycle
operations. Nothing here dispatches, runs handlers or reconciles resources.
"""
