"""Fork, rerun and bulk recovery: what the HTTP routes, the CLI and the Python clients share
(the request models, a fork's preparation from its parent's state and ledger)."""
