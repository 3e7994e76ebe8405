"""The one error shape (``reactq.shared.api.errors``): codes, fields, clipping."""

from __future__ import annotations

from reactq.shared.api.errors import ERROR_CODES, ErrorResponse, code_for, error_body, validation_body


def test_every_status_of_the_closed_list_has_its_code() -> None:
    assert ERROR_CODES == {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                           405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
                           415: "unsupported_media_type", 422: "validation_error", 429: "rate_limited",
                           500: "internal_error", 503: "unavailable"}
    assert code_for(418) == "bad_request" and code_for(502) == "internal_error"


def test_a_validation_error_names_the_dotted_field_and_lists_every_problem() -> None:
    body = validation_body([
        {"type": "extra_forbidden", "loc": ("body", "steps", 0, "color"), "msg": "Extra inputs are not permitted",
         "input": 1},
        {"type": "missing", "loc": ("body", "goal"), "msg": "Field required", "input": {"steps": []}},
        {"type": "int_parsing", "loc": ("query", "limit"), "msg": "Input should be a valid integer", "input": "x"},
    ])
    err = ErrorResponse.model_validate(body).error
    assert err.code == "validation_error" and err.field == "steps.0.color"
    assert err.message == "steps.0.color: Extra inputs are not permitted (and 2 more)"
    assert [(d.field, d.location, d.type) for d in err.details or []] == [
        ("steps.0.color", "body", "extra_forbidden"), ("goal", "body", "missing"), ("limit", "query", "int_parsing")]
    assert err.details is not None and "input" not in err.details[1].model_fields_set  # no echo of a whole body


def test_no_error_echoes_more_than_a_few_hundred_characters() -> None:
    huge = "x" * 100_000
    body = error_body(422, huge, field="query", details=[{"message": huge, "input": huge}])
    assert len(str(body)) < 1000
    body = validation_body([{"type": "string_too_long", "loc": ("body", "query"), "msg": huge, "input": huge}] * 50)
    assert len(body["error"]["details"]) == 20 and len(str(body)) < 20 * 600


def test_the_api_models_import_without_a_web_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, reactq.shared.api; "
            "assert not {'fastapi', 'starlette', 'sse_starlette'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
