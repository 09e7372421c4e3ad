"""Every write others must see goes through one function here, named after its operation.

An action may run twice: under the optimistic shared commit
(`lobbies.fastlane.lane._serve_together`,
`lobbies.fastlane.sqlite.base.optimistic_commit`), when one request of a batch fails the shared
transaction is rolled back and the whole batch served again, each request in a savepoint (and
`lobbies.api.http.run_retrying` reruns a view the database aborted). So an action's only effects are
its writes to the store and what it publishes on commit (`transaction.on_commit`); never send,
spawn, log a message or touch a file or a process-level cache directly, or the replay does it a
second time. tests/lobbies/test_every_tool_may_run_twice.py holds every tool of the catalog to
it: served twice by an abandoned and replayed batch, a tool must leave the store, its answer,
what it published and what it logged as one run leaves them.
"""
