"""DPR data conversion on tiny fake files in DPR's published formats."""

import gzip
import json
from pathlib import Path

import pytest

from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.data import dpr
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_topics, read_qrels_file
from pyserini_moe.errors import DataFormatError
from pyserini_moe.eval.metrics import answer_accuracy
from pyserini_moe.runs import ranked, read_trec_run

# psgs_w100.tsv: header, CSV quoting of the text column (doubled quotes inside).
WIKI = ('id\ttext\ttitle\n'
        '1\t"Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron\n'
        '2\t"Paris is the capital of France"\tParis\n'
        '3\t"The cat sat on the mat"\tCat\n'
        '4\tThe dog barked\tDog\n')


def ctx(pid, key="passage_id"):
    return {"title": f"t{pid}", "text": f"text {pid}", "score": 1.0, key: pid}


def write_json(path: Path, data, indent=2) -> Path:
    path.write_text(json.dumps(data, indent=indent))
    return path


@pytest.fixture
def nq(tmp_path):
    return write_json(tmp_path / "biencoder-nq-train.json", [
        {"question": "capital of france", "answers": ["Paris"], "positive_ctxs": [ctx("2")],
         "negative_ctxs": [ctx("4")], "hard_negative_ctxs": [ctx("3"), ctx("2"), ctx("1")]},
        {"question": "no positive here", "answers": ["x"], "positive_ctxs": [],
         "negative_ctxs": [], "hard_negative_ctxs": [ctx("1")]},
        {"question": "who is aaron", "answers": ["prophet"],
         "positive_ctxs": [ctx("1"), ctx("1")], "negative_ctxs": [], "hard_negative_ctxs": []},
    ])


@pytest.fixture
def trivia(tmp_path):  # TriviaQA's files name the id psg_id and may be gzipped
    path = tmp_path / "biencoder-trivia-train.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump([{"question": "where do cats sit", "answers": ["mat"],
                    "positive_ctxs": [ctx(3, "psg_id")], "negative_ctxs": [],
                    "hard_negative_ctxs": [ctx(4, "psg_id")]}], f)
    return path


def test_wikipedia_is_streamed_to_a_beir_corpus(tmp_path):
    (tmp_path / "psgs_w100.tsv").write_text(WIKI)
    target = tmp_path / "dpr" / "corpus.jsonl.gz"
    assert dpr.convert_wikipedia(tmp_path / "psgs_w100.tsv", target, progress=False) == 4
    docs = list(BeirCollection(tmp_path / "dpr").corpus())
    assert [d.id for d in docs] == ["1", "2", "3", "4"]
    assert docs[0].title == "Aaron" and docs[0].text == 'Aaron ( or ; "Ahärôn") is a prophet'
    assert [p.name for p in target.parent.iterdir()] == ["corpus.jsonl.gz"]  # no temporary left
    assert dpr.passage_texts(tmp_path / "dpr", ["2", "4"]) == {
        "2": "Paris is the capital of France", "4": "The dog barked"}
    assert dpr.passage_texts(tmp_path / "psgs_w100.tsv", ["3"]) == {"3": "The cat sat on the mat"}


@pytest.mark.parametrize("text, line, message", [
    ("id\ttext\ttitle\n1\tok\tT\n2\tonly two\n", 3, "expected 3 tab-separated columns"),
    ("id\ttext\ttitle\n1\tok\tT\n1\tagain\tT\n", 3, r"duplicate passage id '1' \(first at line 2\)"),
    ("id\ttext\ttitle\n1\tok\tT\nbad id\tx\tT\n", 3, "invalid passage id"),
])
def test_malformed_wikipedia_names_file_and_line(tmp_path, text, line, message):
    source = tmp_path / "psgs_w100.tsv"
    source.write_text(text)
    target = tmp_path / "corpus.jsonl.gz"
    with pytest.raises(DataFormatError, match=message) as err:
        dpr.convert_wikipedia(source, target, progress=False)
    assert err.value.path == source and err.value.line == line
    assert not target.exists() and list(tmp_path.iterdir()) == [source]


def test_training_files_merge_into_one_collection(tmp_path, nq, trivia):
    (tmp_path / "psgs_w100.tsv").write_text(WIKI)
    out = tmp_path / "dpr"
    dpr.convert_wikipedia(tmp_path / "psgs_w100.tsv", out / "corpus.jsonl.gz", progress=False)
    stats = dpr.convert_training({"nq": nq, "trivia": trivia}, out, dev={"nq": nq})
    assert stats.questions == {"nq/train": 2, "trivia/train": 1, "nq/dev": 2}
    assert stats.skipped_without_positive["nq/train"] == 1

    collection = BeirCollection(out)  # checks every qrels id against queries and corpus
    assert collection.qrels("train") == {"nq-train-0": {"2": 1}, "nq-train-2": {"1": 1},
                                         "trivia-train-0": {"3": 1}}
    assert collection.qrels("dev") == {"nq-dev-0": {"2": 1}, "nq-dev-2": {"1": 1}}
    first = json.loads((out / "queries.jsonl").read_text().splitlines()[0])
    assert first == {"_id": "nq-train-0", "text": "capital of france", "answers": ["Paris"]}

    run = read_trec_run(out / "bm25-negatives.train.trec")  # DPR's order, positives dropped
    assert [d for d, _ in ranked(run["nq-train-0"])] == ["3", "1"]
    assert list(run) == ["nq-train-0", "trivia-train-0"]
    assert load_topics(str(out / "topics" / "train.trivia.tsv")) == {
        "trivia-train-0": "where do cats sit"}
    assert list(load_topics(str(out / "topics" / "dev.tsv"))) == ["nq-dev-0", "nq-dev-2"]
    assert read_qrels_file(out / "qrels" / "dev.tsv")["nq-dev-2"] == {"1": 1}


@pytest.mark.parametrize("data, line, message", [
    ('[\n  {"question": "q", "answers": ["a"], "positive_ctxs": [{"title": "t"}]}\n]', 2,
     'positive_ctxs\\[0\\] has no "passage_id"'),
    ('[\n {"question": "q", "answers": ["a"], "positive_ctxs": []},\n {"question": ""}\n]', 3,
     '"question" must be a non-empty string'),
    ('[\n {"question": "q", "answers": "a", "positive_ctxs": []}\n]', 2, '"answers" must be'),
    ('[\n {"question": "q",\n  "answers": ["a"] "positive_ctxs": []}\n]', 3, "malformed JSON"),
    ('[\n {"question": "q", "answers": ["a"], "positive_ctxs": []}\n', 3, "not closed"),
    ('{"question": "q"}', 1, "expected a JSON array"),
])
def test_malformed_training_file_names_file_and_line(tmp_path, data, line, message):
    path = tmp_path / "bad.json"
    path.write_text(data)
    with pytest.raises(DataFormatError, match=message) as err:
        dpr.convert_training({"nq": path}, tmp_path / "out")
    assert err.value.path == path and err.value.line == line
    assert not (tmp_path / "out").exists()  # nothing left, not even empty folders


def test_json_examples_are_streamed_across_buffer_boundaries(tmp_path):
    examples = [{"question": f"q{i} \u00e9", "answers": ["a"],
                 "positive_ctxs": [ctx(str(i))], "hard_negative_ctxs": []} for i in range(50)]
    path = write_json(tmp_path / "x.json", examples)
    with dpr._open_text(path) as handle:
        items = list(dpr._JsonArray(handle, path, chunk=7))
    assert [obj for _, obj in items] == examples
    text = path.read_text().splitlines()
    assert all(text[line - 1].strip() == "{" for line, _ in items)


def test_qa_csv_to_topics_with_answers(tmp_path):
    source = tmp_path / "nq-test.qa.csv"
    source.write_text("who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
                      'what is "the" cat\t"[\'mat\', \'say ""hi""\']"\n')
    target = tmp_path / "test" / "nq.jsonl"
    assert dpr.convert_qa(source, target) == 2
    assert load_topics(str(target)) == {"0": "who got the first nobel prize in physics",
                                        "1": 'what is "the" cat'}
    assert dpr.load_answers(target) == {"0": ["Wilhelm Conrad Röntgen"],
                                        "1": ["mat", 'say "hi"']}
    assert dpr.load_answers(source) == dpr.load_answers(target)


@pytest.mark.parametrize("row, message", [
    ("question only\n", "expected question<TAB>answers"),
    ("q\tParis\n", "answers must be a non-empty list"),
    ("q\t[]\n", "answers must be a non-empty list"),
])
def test_malformed_qa_csv_names_file_and_line(tmp_path, row, message):
    source = tmp_path / "x.qa.csv"
    source.write_text("fine\t['a']\n" + row)
    with pytest.raises(DataFormatError, match=message) as err:
        dpr.read_qa_csv(source)
    assert err.value.line == 2


def test_pyserini_dpr_topics_give_answers(monkeypatch):
    import pyserini.search

    import pyserini_moe._java

    monkeypatch.setattr(pyserini_moe._java, "bootstrap", lambda: None)
    monkeypatch.setattr(pyserini.search, "get_topics", lambda name: {
        0: {"title": "q", "answers": "['Linda Davis']"},
        1: {"title": "r", "answers": '"[\'say ""hi""\']"'}})
    assert dpr.load_answers("dpr-nq-test") == {"0": ["Linda Davis"], "1": ['say "hi"']}


def test_answer_accuracy_reads_only_ranked_passages(tmp_path):
    (tmp_path / "psgs_w100.tsv").write_text(WIKI)
    run = {"0": {"3": 2.0, "2": 1.0}, "1": {"4": 5.0, "1": 1.0}}
    answers = {"0": ["Paris"], "1": ["prophet"], "2": ["nowhere"]}
    assert answer_accuracy(run, answers, tmp_path / "psgs_w100.tsv", [1, 2]) == pytest.approx(
        {"top1": 0.0, "top2": 2 / 3})
    with pytest.raises(ValueError, match="'9' that is not in it"):
        answer_accuracy({"0": {"9": 1.0}}, answers, tmp_path / "psgs_w100.tsv", [1])


def test_merge_runs_takes_each_query_from_the_first_run(tmp_path):
    (tmp_path / "mined.trec").write_text("a Q0 d1 1 9.0 m\na Q0 d2 2 8.0 m\n")
    (tmp_path / "bm25.trec").write_text("a Q0 d9 1 1.0 b\nb Q0 d3 1 1.0 b\n")
    dpr_cli.main(["merge-runs", "--runs", str(tmp_path / "mined.trec"), str(tmp_path / "bm25.trec"),
              "--output", str(tmp_path / "merged.trec")])
    assert read_trec_run(tmp_path / "merged.trec") == {"a": {"d1": 9.0, "d2": 8.0},
                                                       "b": {"d3": 1.0}}


def test_cli_rejects_bad_pairs(tmp_path, nq):
    with pytest.raises(ValueError, match="expected NAME=FILE"):
        dpr_cli.main(["train", "--train", str(nq), "--output", str(tmp_path / "o")])
    with pytest.raises(FileNotFoundError, match="'trivia'"):
        dpr_cli.main(["train", "--train", f"nq={nq}", f"trivia={tmp_path / 'no.json'}",
                  "--output", str(tmp_path / "o")])


def test_converted_collection_feeds_the_trainer(tmp_path, nq, trivia):
    from pyserini_moe.train.config import DataConfig, NegativesConfig
    from pyserini_moe.train.data import load_training_data

    (tmp_path / "psgs_w100.tsv").write_text(WIKI)
    out = tmp_path / "dpr"
    dpr_cli.main(["wiki", "--quiet", "--input", str(tmp_path / "psgs_w100.tsv"),
              "--output", str(out / "corpus.jsonl.gz")])
    dpr_cli.main(["train", "--train", f"nq={nq}", f"trivia={trivia}", "--output", str(out)])
    config = DataConfig(collection=str(out), validation_fraction=0.0, negatives=NegativesConfig(
        source="run", run=out / "bm25-negatives.train.trec"))
    data = load_training_data(config, tmp_path / "model", progress=False)
    assert {q: data.candidate_ids(q) for q in data.candidates} == {
        "nq-train-0": ["3", "1"], "nq-train-2": [], "trivia-train-0": ["4"]}
    assert sorted(data.train_pairs) == [("nq-train-0", "2"), ("nq-train-2", "1"),
                                         ("trivia-train-0", "3")]


def test_questions_without_any_hard_negative_write_no_empty_run(tmp_path, capsys):
    """A negatives run with no line is refused by every reader: none is written, and why."""
    from pyserini_moe.cli import dpr as dpr_cli

    (tmp_path / "psgs_w100.tsv").write_text(WIKI)
    train = tmp_path / "train.json"
    train.write_text(json.dumps([{"question": "who?", "answers": ["a"],
                                  "positive_ctxs": [{"passage_id": "1"}],
                                  "hard_negative_ctxs": [{"passage_id": "1"}]}]))
    assert dpr_cli.main(["train", "--train", f"nq={train}", "--output", str(tmp_path / "c")]) == 0
    assert not (tmp_path / "c" / "bm25-negatives.train.trec").exists()
    assert "no training question has a hard negative" in capsys.readouterr().err
