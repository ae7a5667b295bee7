"""The job store: Postgres through asyncpg.

Owns the schema (numbered migrations), every runtime query (named, in the
`*.sql` files here) and the transactions that implement the job lifecycle.
Components call the functions of this package; none of them writes SQL. Nothing of the
driver leaves it: reads answer frozen rows (`rows`), failures are `horae.errors`' (`boundary`),
and components hold its handles (`db.Database`, `db.Listener`, `db.session`), never an
asyncpg pool (only this package imports asyncpg: import-linter). Nothing here knows about
RabbitMQ, Kubernetes or HTTP.
"""
