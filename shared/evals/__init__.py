"""Evals: a dataset of cases run as one batch, each finished run scored by evaluators.

=============  ===============================================================
``cases``      a case (``EvalCase``), parsing a line, the batch line it runs as
``scoring``    ``Score``, ``@evaluator``, the built-in evaluators, ``REACTQ_EVALUATORS``
``judge``      the LLM-graded evaluator (its cost is reported apart)
``report``     the summary of an eval and the comparison of two
=============  ===============================================================

The store is ``reactq.shared.stores.evals``; the driver that scores a batch's results as they
come is ``reactq.dispatcher.evals``.
"""
