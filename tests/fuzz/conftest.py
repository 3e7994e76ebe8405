"""The fuzz tier reuses the integration fixtures: a Redis server, the scripted LLM, workers."""

from tests.integration.conftest import backend, llm, redis_url, workers  # noqa: F401
