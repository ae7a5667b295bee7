"""The HTTP job API (FastAPI): routes, problem+json errors, authentication per tenant.

Owns request validation and the mapping of HTTP onto the store's lifecycle
operations. Nothing here dispatches, runs handlers or reconciles resources.
"""
