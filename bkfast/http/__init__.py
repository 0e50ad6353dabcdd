"""The bookie's admin HTTP server and Prometheus metrics (see bkfast.http.server, bkfast.http.metrics)."""
