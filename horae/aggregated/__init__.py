"""The aggregated API: `kubectl get executions` (group runs.horae.dev) served from the
store behind the cluster's aggregation layer (an APIService), instead of mirrored into etcd.

resource.py  the Execution resource: objects, table rows, selectors, continue tokens (pure)
auth.py      the front-proxy identity and SubjectAccessReview
app.py       discovery, OpenAPI, get/list/watch, metav1.Status errors
openapi.py   the OpenAPI documents (`kubectl explain executions`)
server.py    the HTTPS server: client certificates, probes, the store
"""
