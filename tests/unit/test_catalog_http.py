"""``GET /v1/models`` shows model entries without credentials."""

from reactq.dispatcher.http.catalog import _public_model


def test_model_entries_lose_user_info_query_and_key_fields():
    entry = {"name": "general", "model": "m", "api_key_env": "OPENAI_API_KEY", "api_key": "sk-x",
             "base_url": "https://user:pw@llm.example.com:8443/v1?key=abc"}
    out = _public_model(entry)
    assert out == {"name": "general", "model": "m", "api_key_env": "OPENAI_API_KEY",
                   "base_url": "https://llm.example.com:8443/v1"}
