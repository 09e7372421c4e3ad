"""The dashboard's summarizer: what each agent does now and next, written by a model.

It runs only when someone opens the dashboard, only on a changed input and at most every
interval, one at a time per lobby, with a two-minute timeout and one retry. The request is
built deterministically from the notes snapshots' contents, the newest report and assignment
messages and the visible agents; notes and messages are untrusted data, carried JSON-encoded
in one user message after a fixed system prompt. The model has no tools, and its answer is
validated (strict structure, clipped strings, unknown agents dropped) before the page sees it.

Every attempt is stored with its usage and cost, failures included, and a lobby's attempts
may cost at most the daily ceiling in any 24 hours. One decision per lobby across broker
processes: an attempt is claimed in the store before the model is called, then settled.

By concern:
- `prompt`: the request, built from the store (system prompt, output schema, input).
- `prices`: what an attempt costs and may cost (the operator's price assumptions).
- `client`: one call to the Messages API, its failures in plain words.
- `answer`: the model's answer read and validated into a summary.
- `attempts`: the store's rules: claim, settle, the interval, the ceiling, "unchanged".
- `runs`: when a summary runs (`maybe_summarize`), and what one process remembers.
"""
