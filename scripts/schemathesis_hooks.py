"""Hooks for scripts/schemathesis: keep generated long-polls short, so a run stays within its budget."""

import schemathesis


def _short_polls(body):
    if isinstance(body, dict):
        if isinstance(body.get("wait_ms"), int):
            body["wait_ms"] = min(body["wait_ms"], 100)
        _short_polls(body.get("fetch"))
    return body


@schemathesis.hook
def map_body(ctx, body):
    # FETCH (and ACK's `fetch`) may wait up to 30 s for a job when none is ready: valid, but slow.
    return _short_polls(body)
