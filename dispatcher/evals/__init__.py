"""Evals on the dispatcher's side: making one (``create``), driving its batch while scoring
each line (``drive``), and the scoring itself (``scorer``). The pure parts (cases,
evaluators, summaries, comparisons) are ``reactq.shared.evals``.
"""
