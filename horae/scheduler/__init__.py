"""The scheduler: turns "due at t" into "on the queue at t".

`leases` keeps this replica's fair share of the shard Leases (plus its member
Lease) in the Kubernetes API; `dispatcher` preloads each owned shard's window
from Postgres into a timer heap and publishes at the due moment, fencing every
write with the shard's epoch. `main` wires them up. Nothing here serves HTTP,
runs handlers or reconciles resources.
"""
