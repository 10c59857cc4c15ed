"""The benchmark client: what drives a server during a level, and the metric math.

Nothing here imports a third-party package at import time except `client`, `metrics`,
`request_records` and `workload` (numpy, tokenizers); `worker`, `http1`, `sse` and `messages`
run in the client's worker processes on the standard library alone.
"""
