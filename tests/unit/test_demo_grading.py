"""The demo's `expect` patterns grade against the truth, not against any number in the text."""

import pytest

from reactq.dispatcher.local.demo import is_right, load_questions

Q = {q["id"]: q for q in load_questions(None)}


@pytest.mark.parametrize(("qid", "answer", "right"), [
    ("multiply", "391", True), ("multiply", "17 * 23 = 391.", True), ("multiply", "391.0", True),
    ("multiply", "17 * 23 = 391.5", False), ("multiply", "3391", False),
    ("add", "6.75", True), ("add", "The sum is 6.75.", True), ("add", "26.75", False),
    ("word-count", "9", True), ("word-count", "There are 9 words in the sentence.", True),
    ("word-count", "The number of words is 9.", True), ("word-count", '{"characters": 43, "words": 9}', True),
    ("word-count", "The text contains 43 words, 9 sentences, 1 line", False),
    ("word-count", "The quick brown fox jumps over the lazy dog.", False),
])
def test_expect_patterns(qid: str, answer: str, right: bool) -> None:
    assert is_right(Q[qid], answer) is right


def test_the_demo_suggests_only_a_question_it_just_saw_answered_right() -> None:
    from reactq.dispatcher.local.demo import own_question

    wrong = {"right": False, "request": {"query": "What is 17 * 23? Use the calculator tool.", "tools": ["calculator"]}}
    right = {"right": True, "request": {"query": "Use the add tool to add 2.5 and 4.25.", "tools": ["add"],
                                        "mode": "native", "max_iterations": 4}}
    assert own_question([wrong, right], "reactq") == \
        "reactq run 'Use the add tool to add 2.5 and 4.25.' --tools add --mode native"
    assert own_question([wrong], "reactq") is None
    assert own_question([], "reactq") is None
