"""`delayq web`: the HTTP API (v1) and the web console, one stateless process.

`api.py` has the routes and what each answers, `auth.py` the bearer tokens and roles,
`problems.py` the error answers (RFC 9457), `openapi.py` the OpenAPI 3.1 document
(its schemas in `openapi_schemas.py`, built of the fields in `openapi_fields.py`),
`stats.py` the cluster figures the console draws, `batcher.py` concurrent one-job
requests stored together, `bodies.py` request bodies decoded (large ones in a thread),
`guard.py` the Host, Origin and content-type checks, `deadline.py` the bound on the time
to send headers, `server.py` the process, and
`console/` the console's page, script and style, served as they are.

May import: everything below it (cluster.client, cluster.observe and their layers);
never the node runtime (`actors`), the ingress or the CLI.
"""
