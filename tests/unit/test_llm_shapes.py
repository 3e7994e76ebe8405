"""``tool_results_as = "user"``: tool results reach templates that drop ``tool`` messages."""

from pathlib import Path

from reactq.shared.llm.registry import load_registry
from reactq.shared.llm.shapes import tool_results_as_user
from reactq.shared.models import ChatMessage, ToolCallRequest
from reactq.shared.settings import Settings


def _history() -> list[ChatMessage]:
    return [ChatMessage(role="user", content="what is 17*23?"),
            ChatMessage(role="assistant", content="", tool_calls=[
                ToolCallRequest(id="c1", name="calculator", arguments={"expression": "17*23"})]),
            ChatMessage(role="tool", tool_call_id="c1", name="calculator", content="391")]


def test_tool_messages_become_user_messages_naming_the_tool():
    from reactq.shared.llm.messages import to_openai_message

    wire = tool_results_as_user([to_openai_message(m) for m in _history()])
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert wire[2] == {"role": "user", "content": "Result of the tool call calculator:\n391"}


def test_the_registry_option_shapes_the_request(tmp_path: Path):
    path = tmp_path / "models.toml"
    path.write_text('[models.small]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'tool_results_as = "user"\n[models.big]\nmodel = "n"\nbase_url = "http://127.0.0.1:9/v1"\n')
    reg = load_registry(Settings(models=path))
    small = reg.get("small")._request(_history())["messages"]
    big = reg.get("big")._request(_history())["messages"]
    assert small[-1]["role"] == "user" and "391" in small[-1]["content"]
    assert big[-1] == {"role": "tool", "content": "391", "tool_call_id": "c1"}
