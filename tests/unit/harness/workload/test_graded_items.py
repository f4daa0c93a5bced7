"""Graded items: the three forms read into prompts and references, every grader on replies it must judge each way,
a request's grade from what the request did, the share mixed into an endpoint's prompts — and bad lines named."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailrace.contract.profile import Endpoint
from tailrace.contract.profile.grading import Graded
from tailrace.harness.workload import graders as g
from tailrace.harness.workload.graded_items import GradedFileError, endpoint_prompts, read_graded

GSM8K = {"question": "Ana has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"}
CHOICE = {"question": "Capital of France?", "choices": ["Lyon", "Paris", "Nice"], "answer": 1}


def write(tmp_path: Path, *docs, name: str = "items.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(d if isinstance(d, str) else json.dumps(d) for d in docs) + "\n")
    return path


def test_the_three_forms_read_as_prompts_and_references(tmp_path):
    (item,) = read_graded(Graded(file="x"), write(tmp_path, GSM8K))
    assert item.reference == "7" and item.grader == "last_number" and "Ana has 3 apples" in item.prompt
    (item,) = read_graded(Graded(file="x"), write(tmp_path, CHOICE))
    assert item.reference == "B" and item.grader == "choice" and "B. Paris" in item.prompt and "C. Nice" in item.prompt
    generic = {"messages": [{"role": "user", "content": "Say hi"}], "reference": "hi", "grader": "contains"}
    (item,) = read_graded(Graded(file="x"), write(tmp_path, generic))
    assert item.prompt == generic["messages"] and item.grader == "contains"
    (item,) = read_graded(Graded(file="x", template="Q: {question}\nA:"), write(tmp_path, GSM8K))
    assert item.prompt == f"Q: {GSM8K['question']}\nA:"


GENERIC = {"prompt": "Say yes", "reference": "yes"}


@pytest.mark.parametrize("first, bad, words", [
    (GSM8K, {"question": "q", "answer": "no marker"}, "answer ending '#### N'"),
    (CHOICE, {"question": "q", "choices": ["a", "b"], "answer": "C"}, "answer: a letter A–B"),
    (CHOICE, {"question": "q", "choices": ["a"], "answer": "A"}, "choices (a list of 2 to 26"),
    (GENERIC, {"prompt": "p"}, "needs reference"),
    (GENERIC, {"prompt": "p", "reference": "r", "grader": "nope"}, "grader 'nope'"),
    (GSM8K, "not json", "not JSON"),
], ids=["gsm8k-answer", "choice-letter", "choice-count", "generic-reference", "generic-grader", "json"])
def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path, first, bad, words):
    path = write(tmp_path, first, bad)
    with pytest.raises(GradedFileError) as caught:
        read_graded(Graded(file="x"), path)
    assert str(caught.value).startswith(f"{path}:2: ") and words in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_graders_judge_each_way():
    number = g.number_within(1e-6)
    assert number("so 3 + 4 = 7. #### 7", "7") == g.CORRECT and number("#### 1,072", "1072") == g.CORRECT
    assert number("the answer is 8", "7") == g.WRONG and number("no idea", "7") == g.UNPARSABLE
    assert g.number_within(0.5)("about 7.4", "7") == g.CORRECT
    assert g.choice("The answer is (B).", "B") == g.CORRECT and g.choice("B", "B") == g.CORRECT
    assert g.choice("I think C) is it", "B") == g.WRONG and g.choice("I think so", "B") == g.UNPARSABLE
    assert g.exact("  **Paris**. ", "paris") == g.CORRECT and g.exact("Paris, France", "Paris") == g.WRONG
    assert g.contains("It is Paris, France.", ["Lyon", "paris"]) == g.CORRECT and g.contains("Lyon", "Paris") == g.WRONG
    regex = g.regex(r"ANSWER:\s*(\w+)")
    assert regex("ANSWER: yes ... ANSWER: no", "no") == g.CORRECT and regex("yes", "yes") == g.UNPARSABLE
    schema = {"type": "object", "required": ["a"]}
    assert g.json_schema('```json\n{"a": 1}\n```', schema) == g.CORRECT and g.json_schema('{"b": 1}', schema) == g.WRONG
    assert g.json_schema("not json", schema) == g.UNPARSABLE


def test_a_requests_grade_says_why_it_is_not_right():
    grade = g.number_within(1e-6)
    assert g.grade_request("ok", "complete", "stop", "#### 7", "7", grade) == g.CORRECT
    assert g.grade_request("ok", "complete", "length", "#### 7", "7", grade) == g.CORRECT  # right, though cut short
    assert g.grade_request("ok", "complete", "length", "so far 3 and", "7", grade) == g.TRUNCATED
    assert g.grade_request("ok", "complete", "stop", "#### 8", "7", grade) == g.WRONG
    assert g.grade_request("cancelled", "cancelled", "", "", "7", grade) == g.CUT
    assert g.grade_request("ok", "cut", "", "", "7", grade) == g.CUT
    assert g.grade_request("timeout", "ttft_timeout", "", "", "7", grade) == g.CUT
    assert g.grade_request("http_error", "", "", "", "7", grade) == g.ERROR

    def raises(reply, reference):
        raise RuntimeError("boom")
    assert g.grade_request("ok", "complete", "stop", "#### 7", "7", raises) == g.GRADER_ERROR


def test_a_users_python_grader_is_imported_from_the_data_root_or_named_when_it_cannot_be(tmp_path):
    (tmp_path / "my_grading.py").write_text("def grade(reply, reference):\n    return reference in reply or None\n")
    graded = Graded(file="x", grader="my_grading:grade")
    assert g.load_grader("my_grading:grade", graded, tmp_path)("yes, 42", "42") == g.CORRECT
    assert g.load_grader("my_grading:grade", graded, tmp_path)("nothing", "42") == g.UNPARSABLE
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        g.load_grader("no_such_module:grade", graded, tmp_path)
    with pytest.raises(ValueError, match="has no function absent"):
        g.load_grader("my_grading:absent", graded, tmp_path)


def _endpoint(file: Path, share: float) -> Endpoint:
    return Endpoint.model_validate({"name": "math", "url": "embedded", "protocol": "openai-chat", "model": "m",
                                    "prompts": {"count": 50, "graded": {"file": str(file), "share": share}}})


def test_a_share_of_graded_items_mixes_into_the_endpoints_prompts_the_same_on_every_worker(tmp_path):
    path = write(tmp_path, *[{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(40)])
    items, graded = endpoint_prompts(_endpoint(path, 1.0), 7, tmp_path)
    assert graded is not None and graded.refs == list(range(40)) and len(items) == 40
    assert _endpoint(path, 1.0).prompts.ignore_eos is False  # a graded answer ends where the model ends it
    items, graded = endpoint_prompts(_endpoint(path, 0.25), 7, tmp_path)
    again, _ = endpoint_prompts(_endpoint(path, 0.25), 7, tmp_path)
    assert items == again  # seeded: every worker builds the same
    share = sum(r >= 0 for r in graded.refs) / len(graded.refs)
    assert len(graded.refs) >= 160 and 0.15 < share < 0.35
    carried = [r for r in graded.refs if r >= 0]
    assert carried[:40] == list(range(40))  # in the file's order
    for i, ref in enumerate(graded.refs):
        if ref >= 0:
            assert f"What is {ref} + 1?" in items[i][0]
