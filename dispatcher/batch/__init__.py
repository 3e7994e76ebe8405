"""Batch jobs: many runs from a JSONL file (``reactq batch``) or one HTTP request
(``POST /v1/batches``), at most N in flight, one result line per input line.

=============  ===============================================================
``items``      the lines: parsing and validation, result lines, the tally, idempotency keys
``driver``     ``BatchDriver``: N runs in flight, polled; re-attaching on resume
``flow``       the batch's token budget and its cancellation
``files``      ``reactq batch``: the results file (resumable) and the progress bar
``store``      HTTP batches in Redis, driven by the gateway that holds their lease
=============  ===============================================================
"""
