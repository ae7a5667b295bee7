"""The job store: Postgres through asyncpg.

Owns the schema (numbered migrations), every runtime query (named, in the
`*.sql` files here) and the transactions that implement the job lifecycle.
Components call the functions of this package; none of them writes SQL.
Nothing here knows about RabbitMQ, Kubernetes or HTTP.
"""
